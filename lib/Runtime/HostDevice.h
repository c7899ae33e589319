//===- HostDevice.h - Functions for both the CPU and the GPU ----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// SHOAL_HOST_DEVICE marks a function that the CPU kernels and the CUDA
// kernels both call (__host__ __device__ under nvcc, nothing elsewhere), so
// that the CPU tests check the GPU's arithmetic.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_HOSTDEVICE_H
#define SHOAL_RUNTIME_HOSTDEVICE_H

#if defined(__CUDACC__)
#define SHOAL_HOST_DEVICE __host__ __device__
#else
#define SHOAL_HOST_DEVICE
#endif

#endif // SHOAL_RUNTIME_HOSTDEVICE_H
