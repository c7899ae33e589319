//===- CudaDevice.h - The CUDA device ---------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// One GPU: tensors in device memory, work in order on one compute stream,
// matrix products through cuBLAS. The CUDA kernels (cuda/Registry.cpp) take
// their stream, cuBLAS handle and scratch from here.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_CUDA_CUDADEVICE_H
#define SHOAL_RUNTIME_CUDA_CUDADEVICE_H

#include "Device.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace shoal {
namespace rt {
namespace cuda {

/// Throws Error with CUDA's message when `e` is not cudaSuccess.
void check(cudaError_t e, const char *what);
void check(cublasStatus_t s, const char *what);

class CudaDevice : public Device {
public:
  CudaDevice(int localRank, Precision matmul);
  ~CudaDevice() override;

  BackendKind kind() const override { return BackendKind::CUDA; }
  MemoryKind memory() const override { return MemoryKind::Cuda; }
  std::string name() const override;
  const DeviceSpec *spec() const override { return catalogEntry; }

  Tensor allocate(const TensorType &type) override;
  /// A zeroed device tensor for one kernel's temporaries: counted while it
  /// lives (bytesAllocated, peakBytes), released when the last handle goes
  /// (cudaFree, which waits for the work reading it).
  Tensor temporary(const TensorType &type) override;
  void concatBlocks(const Tensor &blocks, int64_t n, int64_t dim,
                    Tensor &out) override;
  void packBlocks(const Tensor &in, int64_t n, int64_t dim,
                  Tensor &packed) override;
  void reserveArena(std::size_t bytes) override;
  Tensor arenaView(const TensorType &type, std::size_t offset) override;
  std::size_t bytesAllocated() const override { return allocated + arenaSize; }
  std::size_t peakBytes() const override { return peak + arenaSize; }

  void copyFromHost(const Tensor &host, Tensor &dst) override;
  void copyToHost(const Tensor &src, Tensor &host) override;
  void copy(const Tensor &src, Tensor &dst) override;
  void zero(Tensor &t) override;
  void fillBytes(Tensor &t, unsigned char byte) override;
  void synchronize() override;

  void addInto(Tensor &acc, const Tensor &x) override;

  cudaStream_t stream() const { return compute; }
  cublasHandle_t blas() const { return blasHandle; }
  Precision matmulPrecision() const { return precision; }
  int ordinal() const { return deviceIndex; }
  /// Scratch of at least `bytes` bytes on the device, valid until the next
  /// call (it grows in the first step and stays).
  void *workspace(std::size_t bytes);
  /// The device int kernels set to 1 on an index out of range.
  int *errorFlag() const { return flag; }

private:
  int deviceIndex = 0;
  Precision precision;
  cudaDeviceProp props{};
  const DeviceSpec *catalogEntry = nullptr;
  cudaStream_t compute = nullptr;
  cublasHandle_t blasHandle = nullptr;
  std::shared_ptr<uint8_t> arena;
  std::size_t arenaSize = 0;
  void *scratch = nullptr;
  std::size_t scratchSize = 0;
  int *flag = nullptr;
  std::size_t allocated = 0, peak = 0;
};

} // namespace cuda
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_CUDA_CUDADEVICE_H
