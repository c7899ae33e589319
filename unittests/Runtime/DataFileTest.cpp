//===- DataFileTest.cpp - Data files that change under a run ----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// --data FILE (token rows): a file rewritten in place or replaced during the
// run is refused at the next step instead of feeding other rows; a file
// truncated under its mapping is a clear error, not a SIGBUS
// (MappedFile::copyOut); negative token ids are refused like out-of-range
// ones.
//
//===----------------------------------------------------------------------===//

#include "MappedFile.h"
#include "Npy.h"
#include "PlanLoader.h"
#include "tooling/Tooling.h"

#include "CheckpointUtil.h"
#include "ErrorOf.h"
#include "TestUtil.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>

#include <sys/wait.h>
#include <unistd.h>

using namespace shoal::rt;
using namespace shoal::rt::test;
namespace fs = std::filesystem;

namespace {

TrainingInfo tokenTraining() {
  TrainingInfo training;
  training.otherInputs = {"ids"};
  training.otherInputTypes = {TensorType{DType::I64, {2, 4}}};
  training.labels = "labels";
  training.labelsType = TensorType{DType::I64, {2, 4}};
  return training;
}

Tensor tokenRows(int64_t first) {
  Tensor rows(DType::I64, {4, 5});
  for (int64_t i = 0; i < 20; ++i)
    rows.data<int64_t>()[i] = first + i;
  return rows;
}

} // namespace

TEST(DataFile, RefusesAFileThatChangesDuringTheRun) {
  std::string dir = makeTempDir();
  std::string path = dir + "/tokens.npy";
  writeNpy(path, tokenRows(0));
  TrainingOptions options;
  std::unique_ptr<StepData> data = openData(path, tokenTraining(), options);
  Tensor ids = data->make(0, "ids");
  EXPECT_EQ(ids.data<int64_t>()[5], 6);
  EXPECT_EQ(data->make(1, "labels").data<int64_t>()[0], 11);
  // Rewritten in place with other tokens (the same size): refused.
  ::usleep(20000);
  writeNpy(path, tokenRows(50));
  EXPECT_HAS(errorOf([&] { data->make(1, "ids"); }),
             "--data " + path +
                 " changed during the run (rewritten, resized or replaced "
                 "after it was opened)");
  // Replaced by a new file: refused too.
  std::unique_ptr<StepData> again = openData(path, tokenTraining(), options);
  fs::remove(path);
  writeNpy(path, tokenRows(0));
  EXPECT_HAS(errorOf([&] { again->make(0, "ids"); }), "changed during the run");
}

TEST(DataFile, RefusesNegativeTokenIds) {
  std::string dir = makeTempDir();
  std::string path = dir + "/tokens.npy";
  Tensor rows = tokenRows(0);
  rows.data<int64_t>()[6] = -1;
  writeNpy(path, rows);
  TrainingOptions options;
  std::unique_ptr<StepData> data = openData(path, tokenTraining(), options);
  EXPECT_EQ(errorOf([&] { data->make(0, "ids"); }),
            "--data " + path +
                ": token -1 at row 1, column 1 is negative; token ids index "
                "the embedding's rows from 0");
  // As a label (column 1 of row 1 is the label of position 0) it is the
  // loss's to judge (-100: ignored).
  EXPECT_EQ(errorOf([&] { data->make(0, "labels"); }), "");
}

TEST(MappedFile, TruncatedUnderTheMappingIsAnError) {
  std::string dir = makeTempDir();
  std::string path = dir + "/big.bin";
  writeFile(path, std::string(1 << 16, 'x'));
  MappedFile file(path, "data file");
  char buf[16];
  file.copyOut(buf, 100, sizeof(buf), "the data file");
  EXPECT_EQ(buf[0], 'x');
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  EXPECT_TRUE(file.changedOnDisk());
  EXPECT_EQ(errorOf([&] {
              file.copyOut(buf, 1 << 15, sizeof(buf), "the data file");
            }),
            "the data file " + path +
                " was truncated while the run read it (it was rewritten in "
                "place); give each run a file that stays as it is, or write "
                "a new file and rename it over the old one");
  // The guard is gone after the read: other code is unaffected.
  EXPECT_HAS(errorOf([&] {
               file.copyOut(buf, 1 << 16, sizeof(buf), "the data file");
             }),
             "past its 65536 bytes");
}

namespace {
void exitSeven(int) { ::_exit(7); }

// Under AddressSanitizer its own SIGBUS handler was there before shoal's:
// the "default" is its report and exit status 1.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

/// How a process dies of a SIGBUS that nobody but the previous handler
/// (the kernel's default, or a sanitizer's) handles.
bool diedOfBusError(int status) {
  if (kAsan)
    return WIFEXITED(status) && WEXITSTATUS(status) == 1;
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS;
}
} // namespace

TEST(MappedFile, PassesOtherBusErrorsToThePreviousHandler) {
  // A SIGBUS outside a guarded copy goes to the handler installed before
  // shoal's (a sanitizer's, a host application's). In a fresh process, so
  // that shoal's handler is installed after the test's.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::string dir = makeTempDir();
  std::string path = dir + "/small.bin";
  writeFile(path, std::string(64, 'x'));
  EXPECT_EXIT(
      {
        ::signal(SIGBUS, exitSeven);
        MappedFile file(path, "data file");
        char buf[4];
        file.copyOut(buf, 0, sizeof(buf), "the data file");
        ::raise(SIGBUS);
      },
      ::testing::ExitedWithCode(7), "");
  // Without one, the process dies of SIGBUS as it would without shoal.
  EXPECT_EXIT(
      {
        MappedFile file(path, "data file");
        char buf[4];
        file.copyOut(buf, 0, sizeof(buf), "the data file");
        ::raise(SIGBUS);
      },
      diedOfBusError, "");
}
