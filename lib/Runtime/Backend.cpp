//===- Backend.cpp - Backend selection and CUDA coverage --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Backend.h"

#include "Communicator.h"
#include "Device.h"
#include "PlanLoader.h"

using namespace shoal::rt;

bool shoal::rt::parseBackend(const std::string &text, BackendKind &out) {
  if (text == "cpu")
    out = BackendKind::CPU;
  else if (text == "cuda")
    out = BackendKind::CUDA;
  else
    return false;
  return true;
}

const char *shoal::rt::backendName(BackendKind kind) {
  return kind == BackendKind::CUDA ? "cuda" : "cpu";
}

#ifndef SHOAL_HAVE_CUDA
bool shoal::rt::cudaBackendBuilt() { return false; }

std::unique_ptr<Device> shoal::rt::makeCudaDevice(int, Precision) {
  throw Error("no CUDA device: this build of shoal has no CUDA backend "
              "(configure with -DSHOAL_ENABLE_CUDA=ON where nvcc exists); "
              "use --backend cpu");
}

std::unique_ptr<Communicator> shoal::rt::makeNcclWorld(Communicator &,
                                                       Device &) {
  throw Error("NCCL (--comm nccl): this build of shoal has no CUDA backend");
}
#endif
