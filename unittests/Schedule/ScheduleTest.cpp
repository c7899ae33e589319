//===- ScheduleTest.cpp - Tests of the pipeline schedules -------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "shoal/Schedule/Schedule.h"

#include <gtest/gtest.h>

using namespace shoal::sched;

namespace {

std::string orderOf(const Schedule &s, int stage) {
  std::string out;
  for (const Step &st : s.order[stage])
    out += (out.empty() ? "" : " ") + str(st, s.chunks > 1);
  return out;
}

Schedule make(Kind kind, int p, int m, int v = 1, bool forwardOnly = false) {
  Schedule s;
  std::string error = build(kind, p, m, v, forwardOnly, s);
  EXPECT_EQ(error, "");
  return s;
}

} // namespace

TEST(Schedule, GPipeRunsAllForwardsThenAllBackwards) {
  Schedule s = make(Kind::GPipe, 2, 3);
  EXPECT_EQ(orderOf(s, 0), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(orderOf(s, 1), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(s.peakInFlight(0), 3);
}

TEST(Schedule, OneFOneBWarmsUpThenAlternates) {
  // PipeDream-flush: stage s runs p - s - 1 forwards before its first
  // backward.
  Schedule s = make(Kind::OneFOneB, 4, 8);
  EXPECT_EQ(orderOf(s, 0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(orderOf(s, 2), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(orderOf(s, 3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  for (int stage = 0; stage < 4; ++stage)
    EXPECT_EQ(s.peakInFlight(stage), 4 - stage);
}

TEST(Schedule, InterleavedFollowsMegatron) {
  // p = 2, m = 4, v = 2: micro-batches go through the chunks in groups of p.
  Schedule s = make(Kind::Interleaved, 2, 4, 2);
  EXPECT_EQ(orderOf(s, 0), "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 "
                           "F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(s.bubbleFraction(), 1.0 / 8);
}

TEST(Schedule, EverySchedulePipelinesWithoutDeadlockInTheIdealTime) {
  // With unit step times every schedule finishes in 2 (m v + p - 1) steps:
  // the bubble is (p - 1) / (m v) of the work.
  for (Kind kind : {Kind::GPipe, Kind::OneFOneB, Kind::Interleaved})
    for (int p = 1; p <= 5; ++p)
      for (int m = 1; m <= 10; ++m)
        for (int v : {1, 2, 3}) {
          if ((kind == Kind::Interleaved) != (v > 1) ||
              (kind == Kind::Interleaved && m % p != 0))
            continue;
          Schedule s = make(kind, p, m, v);
          int makespan = 0;
          EXPECT_EQ(replay(s, &makespan), "")
              << kindName(kind) << " p=" << p << " m=" << m << " v=" << v;
          EXPECT_EQ(makespan, 2 * (m * v + p - 1))
              << kindName(kind) << " p=" << p << " m=" << m << " v=" << v;
          for (int stage = 0; stage < p; ++stage)
            EXPECT_EQ(s.order[stage].size(), static_cast<size_t>(2 * m * v));
        }
}

TEST(Schedule, ForwardOnlySchedulesKeepTheForwardOrder) {
  Schedule s = make(Kind::OneFOneB, 3, 4, 1, /*forwardOnly=*/true);
  EXPECT_EQ(orderOf(s, 0), "F0 F1 F2 F3");
  int makespan = 0;
  EXPECT_EQ(replay(s, &makespan), "");
  EXPECT_EQ(makespan, 4 + 3 - 1);
}

TEST(Schedule, ReplayFindsDeadlocksAndMissingOrRepeatedSteps) {
  Schedule s = make(Kind::OneFOneB, 2, 2);
  // Stage 0 waits for B0 before it sends F1, while stage 1 waits for F1
  // before it runs B0: a deadlock.
  s.order[0] = {Step{false, 0, 0}, Step{true, 0, 0}, Step{false, 1, 0},
                Step{true, 1, 0}};
  s.order[1] = {Step{false, 0, 0}, Step{false, 1, 0}, Step{true, 0, 0},
                Step{true, 1, 0}};
  EXPECT_NE(replay(s).find("deadlock"), std::string::npos) << replay(s);
  Schedule missing = make(Kind::GPipe, 2, 2);
  missing.order[0].pop_back(); // B1 of the first stage: nothing waits on it
  EXPECT_NE(replay(missing).find("never runs"), std::string::npos);
  Schedule twice = make(Kind::GPipe, 1, 2);
  twice.order[0].push_back(Step{true, 1, 0});
  EXPECT_NE(replay(twice).find("twice"), std::string::npos);
}

TEST(Schedule, RejectsImpossibleParameters) {
  Schedule s;
  EXPECT_NE(build(Kind::Interleaved, 4, 6, 2, false, s).find("multiple"),
            std::string::npos);
  EXPECT_NE(build(Kind::Interleaved, 2, 4, 1, false, s).find("2 chunks"),
            std::string::npos);
  EXPECT_NE(build(Kind::GPipe, 2, 4, 2, false, s).find("one chunk"),
            std::string::npos);
  EXPECT_NE(build(Kind::OneFOneB, 0, 4, 1, false, s), "");
  Kind k;
  EXPECT_TRUE(parseKind("1f1b", k));
  EXPECT_EQ(k, Kind::OneFOneB);
  EXPECT_FALSE(parseKind("zb", k));
}
