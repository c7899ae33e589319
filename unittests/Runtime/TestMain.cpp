//===- TestMain.cpp - gtest main for the runtime tests ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// MPI is started lazily (TestUtil.h, ensureMpi) by the tests that need it, so
// that listing and running the other tests costs no MPI start-up; it is
// finalized here.
//
//===----------------------------------------------------------------------===//

#include "BackendRegistry.h"
#include "Communicator.h"
#include "TestUtil.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <memory>

shoal::rt::Communicator &shoal::rt::test::mpiWorld() {
  ensureMpi();
  static std::unique_ptr<Communicator> world = makeMpiWorld();
  return *world;
}

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  shoal::rt::registerAllBackends();
  // Under mpiexec every rank must join MPI even if its filter selects no
  // test that needs it.
  if (std::getenv("OMPI_COMM_WORLD_SIZE") && !::testing::GTEST_FLAG(list_tests))
    MPI_Init(&argc, &argv);
  int result = RUN_ALL_TESTS();
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized)
    MPI_Finalize();
  return result;
}
