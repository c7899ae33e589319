//===- Backend.cpp - The CUDA backend's registration ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "cuda/Backend.h"

#include "BackendRegistry.h"
#include "Communicator.h"
#include "Device.h"

using namespace shoal::rt;

void shoal::rt::registerCudaBackend() {
  BackendInfo info;
  info.kind = BackendKind::CUDA;
  info.name = "cuda";
  info.makeDevice = makeCudaDevice;
  info.registerKernels = registerCudaKernels;
  info.makeDeviceWorld = makeNcclWorld;
  info.deviceWorldName = "nccl";
  registerBackend(info);
}
