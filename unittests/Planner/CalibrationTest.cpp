//===- CalibrationTest.cpp - Fitting figures from profiles ------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Synthetic profiles whose times follow the cost model's formulas exactly
// for known figures; the fit must give those figures back, and a cluster
// with them applied must predict those times.
//
//===----------------------------------------------------------------------===//

#include "shoal/Planner/Calibration.h"
#include "shoal/Planner/CostModel.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace shoal::planner;

namespace {

// The figures the synthetic profiles are made with.
constexpr double kPeak = 2.0e11;     // FLOP/s
constexpr double kHalfRows = 48;     // rows at half the peak
constexpr double kMemory = 8.0e9;    // bytes/s
constexpr double kLinkBw = 3.0e9;    // bytes/s
constexpr double kLatency = 12.0e-6; // s

double matmulSeconds(double flops, double rows) {
  return flops / (kPeak * rows / (rows + kHalfRows));
}

std::string opRecord(const char *kind, double flops, double bytes, double rows,
                     double seconds) {
  return fmt::format("{{\"op\": 0, \"kind\": \"{}\", \"task\": \"\", "
                     "\"micro_batch\": 0, \"flops\": {:.0f}, \"bytes\": "
                     "{:.0f}{}, \"seconds\": {:.12g}}}",
                     kind, flops, bytes,
                     rows > 0 ? fmt::format(", \"rows\": {:.0f}", rows) : "",
                     seconds);
}

/// A profile of one CPU rank with matrix products at several row counts,
/// elementwise ops, all-reduces and all-gathers over 2 and 4 ranks, and
/// transfers.
std::string syntheticProfile() {
  std::vector<std::string> ops, colls, transfers;
  for (double rows : {8.0, 32.0, 128.0, 512.0}) {
    double flops = 2 * rows * 1024 * 1024;
    ops.push_back(opRecord("Gemm", flops, 0, rows, matmulSeconds(flops, rows)));
  }
  for (double bytes : {4096.0, 65536.0, 1048576.0})
    ops.push_back(opRecord("Gelu", bytes / 8, bytes, 0, bytes / kMemory));
  // Ops that calibration leaves out: communication and aliases.
  ops.push_back(opRecord("AllReduce", 0, 0, 0, 1.0));
  ops.push_back(opRecord("Reshape", 0, 4096, 0, 0));
  int op = 0;
  for (double bytes : {16384.0, 262144.0, 4194304.0})
    for (int n : {2, 4}) {
      double ar = 2 * ((n - 1.0) / n * bytes / kLinkBw + (n - 1) * kLatency);
      double ag = (n - 1.0) / n * bytes / kLinkBw + (n - 1) * kLatency;
      colls.push_back(fmt::format(
          "{{\"op\": {}, \"kind\": \"AllReduce\", \"micro_batch\": 0, "
          "\"bytes\": {:.0f}, \"group_size\": {}, \"group_nodes\": 1, "
          "\"seconds\": {:.12g}}}",
          op++, bytes, n, ar));
      colls.push_back(fmt::format(
          "{{\"op\": {}, \"kind\": \"AllGather\", \"micro_batch\": 0, "
          "\"bytes\": {:.0f}, \"group_size\": {}, \"group_nodes\": 1, "
          "\"seconds\": {:.12g}}}",
          op++, bytes, n, ag));
    }
  for (double bytes : {1024.0, 1048576.0})
    transfers.push_back(fmt::format(
        "{{\"transfer\": 0, \"micro_batch\": 0, \"src\": [0], \"dst\": 1, "
        "\"bytes\": {:.0f}, \"nodes\": 1, \"seconds\": {:.12g}}}",
        bytes, kLatency + bytes / kLinkBw));
  return fmt::format(R"({{"format": "shoal-profile", "version": 1,
  "plan": "p.plan", "device": "CPU", "device_name": "cpu",
  "precision": "fp32", "world_size": 1, "steps": 5, "warmup": 1,
  "step_seconds": 0.01,
  "ranks": [{{"rank": 0, "node": 0, "program": 0, "role": "spmd",
    "stage": 0, "device": "CPU",
    "ops": [{}],
    "collectives": [{}]}}],
  "transfers": [{}]}}
)",
                     fmt::join(ops, ",\n"), fmt::join(colls, ",\n"),
                     fmt::join(transfers, ",\n"));
}

const char kCluster[] = R"(version: 1
nodes:
  - {devices: {type: CPU, count: 4}}
)";

void expectError(const std::string &text, const std::string &needle) {
  try {
    parseProfile(text, "prof.json");
    ADD_FAILURE() << "no error, expected one containing: " << needle;
  } catch (const SpecError &e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << e.what();
  }
}

TEST(Calibration, RecoversDeviceAndLinkFigures) {
  Profile p = parseProfile(syntheticProfile(), "prof.json");
  EXPECT_EQ(p.device, "CPU");
  EXPECT_EQ(p.ops.size(), 9u);
  EXPECT_EQ(p.comms.size(), 14u);
  Calibration cal = fitProfiles({p});
  const DeviceFit *d = cal.find("cpu");
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->matmul);
  EXPECT_NEAR(d->peakTflops, kPeak / 1e12, 1e-6 * kPeak / 1e12);
  EXPECT_NEAR(d->halfRows, kHalfRows, 1e-4);
  EXPECT_EQ(d->matmulSamples, 4);
  ASSERT_TRUE(d->memory);
  EXPECT_NEAR(d->bandwidthGBps, kMemory / 1e9, 1e-6);
  EXPECT_EQ(d->memorySamples, 3);
  ASSERT_TRUE(d->link);
  EXPECT_NEAR(d->linkGBps, kLinkBw / 1e9, 1e-6);
  EXPECT_NEAR(d->linkLatencyUs, kLatency * 1e6, 1e-4);
  EXPECT_EQ(d->linkSamples, 14);
  EXPECT_FALSE(cal.interNode.fitted);
  EXPECT_TRUE(cal.notes.empty());

  // The calibrated cluster predicts the profile's times.
  Cluster c = parseClusterSpecText(kCluster, "c.yaml");
  std::vector<std::string> lines = applyCalibration(cal, c);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("CPU: matrix products 0.2 TFLOP/s fp32 (was 0.1)"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[2].find("intra-node link 3 GB/s, 12.00 us (was shm"),
            std::string::npos)
      << lines[2];
  CostModel cost(c, Precision::FP32);
  double flops = 2 * 64.0 * 1024 * 1024;
  EXPECT_NEAR(cost.opSeconds(0, flops, 0, OpClass::MatMul, 64),
              matmulSeconds(flops, 64), 1e-12);
  EXPECT_NEAR(cost.opSeconds(0, 1000, 80000, OpClass::Elementwise),
              80000 / kMemory, 1e-12);
  EXPECT_NEAR(cost.allReduceSeconds({0, 1, 2}, 3e6),
              2 * (2.0 / 3 * 3e6 / kLinkBw + 2 * kLatency), 1e-12);
  EXPECT_NEAR(cost.sendRecvSeconds(0, 3, 5e5), kLatency + 5e5 / kLinkBw, 1e-12);
}

TEST(Calibration, CopyRateIsTheMedianOfTheRanks) {
  // Three ranks measured their copy rate (shoal-run --profile); one did not.
  std::string rank = R"({{"rank": {}, "device": "CPU"{}, "ops": [{}]}})";
  std::string gelu = opRecord("Gelu", 0, 1e6, 0, 1e6 / kMemory);
  std::string text = fmt::format(
      R"({{"format": "shoal-profile", "version": 1, "plan": "p.plan",
  "device": "CPU", "device_name": "cpu", "precision": "fp32",
  "world_size": 4, "steps": 5, "warmup": 1, "step_seconds": 0.01,
  "ranks": [{}, {}, {}, {}]}})",
      fmt::format(rank, 0, ", \"copy_GBps\": 30", gelu),
      fmt::format(rank, 1, ", \"copy_GBps\": 90", gelu),
      fmt::format(rank, 2, ", \"copy_GBps\": 40", gelu),
      fmt::format(rank, 3, "", gelu));
  Profile p = parseProfile(text, "prof.json");
  ASSERT_EQ(p.copyRates.size(), 3u);
  Calibration cal = fitProfiles({p});
  const DeviceFit *d = cal.find("CPU");
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->copy);
  EXPECT_DOUBLE_EQ(d->copyGBps, 40);
  EXPECT_EQ(d->copySamples, 3);

  // Copies take the copy rate; other ops keep the memory bandwidth.
  Cluster c = parseClusterSpecText(kCluster, "c.yaml");
  std::vector<std::string> lines = applyCalibration(cal, c);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("CPU: copies 40 GB/s (was 8 GB/s), from 3 ranks"),
            std::string::npos)
      << lines[1];
  CostModel cost(c, Precision::FP32);
  EXPECT_NEAR(cost.opSeconds(0, 0, 8e6, OpClass::Copy), 8e6 / 40e9, 1e-15);
  EXPECT_NEAR(cost.opSeconds(0, 0, 8e6, OpClass::Elementwise), 8e6 / kMemory,
              1e-15);

  // A copy rate that is not a number is refused naming the rank.
  expectError(
      fmt::format(R"({{"format": "shoal-profile", "version": 1,
  "device": "CPU", "precision": "fp32", "world_size": 1, "steps": 1,
  "warmup": 0, "step_seconds": 0.01, "ranks": [{}]}})",
                  fmt::format(rank, 0, ", \"copy_GBps\": \"fast\"", gelu)),
      "copy_GBps");
}

TEST(Calibration, CollectivesAtTheFastestRankAndInterNodeLinks) {
  // Two ranks time the same all-reduce; the slower one waited for the
  // other. Groups with one rank per node give the inter-node link.
  std::string text = R"({"format": "shoal-profile", "version": 1,
    "device": "CPU", "world_size": 2,
    "ranks": [
      {"rank": 0, "program": 0, "ops": [], "collectives": [
        {"op": 1, "kind": "AllReduce", "micro_batch": 0, "bytes": 1000000,
         "group_size": 2, "group_nodes": 2, "seconds": 0.5},
        {"op": 2, "kind": "AllReduce", "micro_batch": 0, "bytes": 3000000,
         "group_size": 2, "group_nodes": 2, "seconds": 0.0061}]},
      {"rank": 1, "program": 0, "ops": [], "collectives": [
        {"op": 1, "kind": "AllReduce", "micro_batch": 0, "bytes": 1000000,
         "group_size": 2, "group_nodes": 2, "seconds": 0.0021},
        {"op": 2, "kind": "AllReduce", "micro_batch": 0, "bytes": 3000000,
         "group_size": 2, "group_nodes": 2, "seconds": 0.7}]}],
    "transfers": []})";
  Profile p = parseProfile(text, "two.json");
  ASSERT_EQ(p.comms.size(), 2u);
  Calibration cal = fitProfiles({p});
  // t = S / bw + 2 lat: 1e6 -> 2.1 ms, 3e6 -> 6.1 ms: 0.5 GB/s, 50 us.
  ASSERT_TRUE(cal.interNode.fitted);
  EXPECT_NEAR(cal.interNode.bandwidthGBps, 0.5, 1e-9);
  EXPECT_NEAR(cal.interNode.latencyUs, 50, 1e-6);
  EXPECT_EQ(cal.find("CPU"), nullptr);
  Cluster c = parseClusterSpecText(R"(version: 1
nodes:
  - {count: 2, devices: {type: CPU, count: 1}}
links:
  inter_node: {type: tcp}
)",
                                   "c.yaml");
  std::vector<std::string> lines = applyCalibration(cal, c);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "inter-node link 0.5 GB/s, 50.00 us (was 3.125 GB/s, "
                      "50.00 us), from 2 collectives and transfers");
  EXPECT_DOUBLE_EQ(c.interNode.bandwidthGBps, 0.5);
}

TEST(Calibration, OneSizeGivesThePeakAlone) {
  std::string text = fmt::format(
      R"({{"format": "shoal-profile", "version": 1, "device": "CPU",
      "world_size": 1, "ranks": [{{"ops": [{}, {}]}}]}})",
      opRecord("MatMul", 1e9, 0, 64, 0.01),
      opRecord("MatMul", 2e9, 0, 64, 0.02));
  Calibration cal = fitProfiles({parseProfile(text, "one.json")});
  const DeviceFit *d = cal.find("CPU");
  ASSERT_NE(d, nullptr);
  EXPECT_NEAR(d->peakTflops, 0.1, 1e-12);
  EXPECT_EQ(d->halfRows, 0);
  ASSERT_EQ(cal.notes.size(), 1u);
  EXPECT_EQ(cal.notes[0], "CPU: no size curve fitted (half rows 0): matrix "
                          "products of 64 rows only");
}

TEST(Calibration, BandwidthKeepsMatrixProductsComputeBound) {
  // Elementwise ops at 1 GB/s, a matrix product that moved 4 MB in 1 ms:
  // at 1 GB/s the cost model would make it take 4 ms.
  std::string text = fmt::format(
      R"({{"format": "shoal-profile", "version": 1, "device": "CPU",
      "world_size": 1, "ranks": [{{"ops": [{}, {}, {}]}}]}})",
      opRecord("Gemm", 1e8, 4e6, 64, 1e-3), opRecord("Gelu", 1e5, 1e6, 0, 1e-3),
      opRecord("Add", 1e5, 2e6, 0, 2e-3));
  Calibration cal = fitProfiles({parseProfile(text, "bw.json")});
  const DeviceFit *d = cal.find("CPU");
  ASSERT_NE(d, nullptr);
  EXPECT_NEAR(d->bandwidthGBps, 4, 1e-9);
  ASSERT_EQ(cal.notes.size(), 2u);
  EXPECT_EQ(cal.notes[1], "CPU: memory bandwidth raised from 1 GB/s (other "
                          "ops) to 4 GB/s, the most a measured matrix product "
                          "moved, so that none is memory bound in the cost "
                          "model (one bandwidth for every op class)");
}

TEST(Calibration, Errors) {
  expectError("[1, 2", "prof.json:1: not a valid profile (JSON)");
  expectError("[1, 2]", "prof.json: not a shoal-run profile");
  expectError(R"({"format": "chrome"})",
              "prof.json:1: not a shoal-run profile (\"format\" must be "
              "\"shoal-profile\"");
  expectError(R"({"format": "shoal-profile", "version": 2})",
              "profile version 2 is not supported (expected 1)");
  expectError(R"({"format": "shoal-profile", "version": 1, "device": "CPU",
                  "world_size": 1})",
              "prof.json:1: the profile has no 'ranks'");
  expectError(R"({"format": "shoal-profile", "version": 1, "device": "CPU",
                  "world_size": 1, "ranks": [{"rank": 3, "ops": [
                  {"kind": "Gemm", "flops": 1, "bytes": 1}]}]})",
              "prof.json:3: an op record of rank 3 has no 'seconds'");
  expectError(R"({"format": "shoal-profile", "version": 1, "device": "CPU",
                  "world_size": 1, "ranks": [{"rank": 0, "ops": [
                  {"kind": "Gemm", "flops": 1, "bytes": 1,
                   "seconds": "fast"}]}]})",
              "prof.json:4: 'seconds' of an op record of rank 0 must be a "
              "number");
  expectError(R"({"format": "shoal-profile", "version": 1, "device": "CPU",
                  "world_size": 1, "precision": "fp8", "ranks": []})",
              "unknown precision 'fp8'");
  try {
    loadProfile("/nonexistent/prof.json");
    ADD_FAILURE() << "no error";
  } catch (const SpecError &e) {
    EXPECT_STREQ(e.what(), "/nonexistent/prof.json: cannot read the profile: "
                           "No such file or directory");
  }
  // Nothing to fit.
  Profile empty = parseProfile(R"({"format": "shoal-profile", "version": 1,
      "device": "CPU", "world_size": 1, "ranks": [{"ops": []}]})",
                               "empty.json");
  try {
    fitProfiles({empty});
    ADD_FAILURE() << "no error";
  } catch (const SpecError &e) {
    EXPECT_NE(std::string(e.what()).find("empty.json: no op or communication "
                                         "times to fit"),
              std::string::npos)
        << e.what();
  }
  // A profile of devices the cluster does not have.
  Calibration cal = fitProfiles({parseProfile(syntheticProfile(), "p.json")});
  Cluster v100 = parseClusterSpecText(
      "version: 1\nnodes:\n  - {devices: {type: V100, count: 2}}\n", "c.yaml");
  try {
    applyCalibration(cal, v100);
    ADD_FAILURE() << "no error";
  } catch (const SpecError &e) {
    EXPECT_STREQ(e.what(), "p.json: the profiles measured CPU devices, but "
                           "the cluster has none (its devices: V100)");
  }
}

} // namespace
