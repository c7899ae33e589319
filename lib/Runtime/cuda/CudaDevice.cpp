//===- CudaDevice.cpp - The CUDA device -------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "cuda/CudaDevice.h"
#include "cuda/Backend.h"

#include "cuda/Kernels.h"

#include <fmt/format.h>

#include <algorithm>

using namespace shoal::rt;
using namespace shoal::rt::cuda;

void shoal::rt::cuda::check(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw Error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

void shoal::rt::cuda::check(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(fmt::format("{}: cuBLAS status {}", what, static_cast<int>(s)));
}

CudaDevice::CudaDevice(int localRank, Precision matmul) : precision(matmul) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    throw Error(fmt::format(
        "no CUDA device is usable ({}); run on a machine with a GPU or use "
        "--backend cpu",
        e != cudaSuccess ? cudaGetErrorString(e) : "0 devices"));
  deviceIndex = localRank % count;
  check(cudaSetDevice(deviceIndex), "cudaSetDevice");
  check(cudaGetDeviceProperties(&props, deviceIndex),
        "cudaGetDeviceProperties");
  catalogEntry = findDevice(props.name);
  check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking),
        "cudaStreamCreate");
  check(cublasCreate(&blasHandle), "cublasCreate");
  check(cublasSetStream(blasHandle, compute), "cublasSetStream");
  check(cublasSetMathMode(blasHandle, precision == Precision::TF32
                                          ? CUBLAS_TF32_TENSOR_OP_MATH
                                          : CUBLAS_DEFAULT_MATH),
        "cublasSetMathMode");
  check(cudaMalloc(reinterpret_cast<void **>(&flag), sizeof(int)),
        "cudaMalloc");
  check(cudaMemset(flag, 0, sizeof(int)), "cudaMemset");
}

CudaDevice::~CudaDevice() {
  cudaStreamSynchronize(compute);
  arena.reset();
  cudaFree(scratch);
  cudaFree(flag);
  cublasDestroy(blasHandle);
  cudaStreamDestroy(compute);
}

std::string CudaDevice::name() const {
  return fmt::format("cuda:{} {}", deviceIndex, props.name);
}

namespace {

std::shared_ptr<uint8_t> deviceBuffer(std::size_t bytes, const char *what) {
  void *p = nullptr;
  check(cudaMalloc(&p, std::max<std::size_t>(bytes, 256)), what);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t *>(p),
                                  [](uint8_t *q) { cudaFree(q); });
}

} // namespace

Tensor CudaDevice::allocate(const TensorType &type) {
  Tensor t = Tensor::view(type, deviceBuffer(type.numBytes(), "cudaMalloc"),
                          MemoryKind::Cuda);
  check(cudaMemsetAsync(t.rawData(), 0, std::max<std::size_t>(t.numBytes(), 1),
                        compute),
        "cudaMemsetAsync");
  allocated += type.numBytes();
  peak = std::max(peak, allocated);
  return t;
}

Tensor CudaDevice::temporary(const TensorType &type) {
  // Stream-ordered on the compute stream (the driver's pool): no device
  // synchronization per call. A temporary that another stream reads (a
  // collective's) is released only after the host has waited for it.
  std::size_t bytes = std::max<std::size_t>(type.numBytes(), 256);
  void *p = nullptr;
  check(cudaMallocAsync(&p, bytes, compute),
        "cudaMallocAsync (a kernel's temporary)");
  allocated += bytes;
  peak = std::max(peak, allocated);
  cudaStream_t stream = compute;
  std::shared_ptr<uint8_t> buffer(static_cast<uint8_t *>(p),
                                  [this, bytes, stream](uint8_t *q) {
                                    cudaFreeAsync(q, stream);
                                    allocated -= bytes;
                                  });
  Tensor t = Tensor::view(type, std::move(buffer), MemoryKind::Cuda);
  check(cudaMemsetAsync(t.rawData(), 0, bytes, compute), "cudaMemsetAsync");
  return t;
}

void CudaDevice::concatBlocks(const Tensor &blocks, int64_t n, int64_t dim,
                              Tensor &out) {
  Shape block = out.shape();
  if (n <= 0 || dim < 0 || dim >= static_cast<int64_t>(block.size()) ||
      block[dim] % n != 0 || blocks.numBytes() != out.numBytes())
    throw Error(fmt::format("internal error: {} blocks of {} along {}", n,
                            out.type().str(), dim));
  block[dim] /= n;
  std::size_t bytes = out.numBytes() / static_cast<std::size_t>(n);
  std::vector<const void *> parts;
  for (int64_t j = 0; j < n; ++j)
    parts.push_back(blocks.bytes() + j * bytes);
  cuda::concat(parts, std::vector<Shape>(n, block), dim, dtypeSize(out.dtype()),
               out.rawData(), out.shape(), compute);
}

void CudaDevice::packBlocks(const Tensor &in, int64_t n, int64_t dim,
                            Tensor &packed) {
  const Shape &s = in.shape();
  int64_t size = s[dim], block = (size + n - 1) / n;
  Shape blockShape = s;
  blockShape[dim] = block;
  std::size_t elem = dtypeSize(in.dtype());
  std::size_t blockBytes =
      static_cast<std::size_t>(numElements(blockShape)) * elem;
  check(cudaMemsetAsync(packed.rawData(), 0, packed.numBytes(), compute),
        "cudaMemsetAsync");
  std::vector<int64_t> starts(s.size(), 0), steps(s.size(), 1);
  for (int64_t j = 0; j < n; ++j) {
    int64_t rows = std::min(block, size - j * block);
    if (rows <= 0)
      continue;
    starts[dim] = j * block;
    uint8_t *region = packed.bytes() + j * blockBytes;
    Shape part = s;
    part[dim] = rows;
    if (rows == block) { // the block is dense in the packed buffer
      cuda::slice(in.rawData(), elem, s, starts, steps, region, part, compute);
      continue;
    }
    // A short last block: its rows, then stored with the full block's
    // strides (the padding stays zero).
    Tensor rowsOnly = temporary({in.dtype(), part});
    cuda::slice(in.rawData(), elem, s, starts, steps, rowsOnly.rawData(), part,
                compute);
    cuda::stridedCopy(rowsOnly.rawData(), region, elem, part,
                      cuda::rowMajorStrides(blockShape),
                      numElements(blockShape), true, compute, "ReduceScatter");
  }
}

void CudaDevice::reserveArena(std::size_t bytes) {
  if (arena && bytes <= arenaSize)
    return;
  synchronize();
  arena = deviceBuffer(bytes, "allocating the activation arena");
  arenaSize = bytes;
}

Tensor CudaDevice::arenaView(const TensorType &type, std::size_t offset) {
  if (offset + type.numBytes() > arenaSize)
    throw Error(fmt::format("internal error: arena view at {} of {} bytes past "
                            "the {} byte arena",
                            offset, type.numBytes(), arenaSize));
  return Tensor::view(type,
                      std::shared_ptr<uint8_t>(arena, arena.get() + offset),
                      MemoryKind::Cuda);
}

void CudaDevice::copyFromHost(const Tensor &host, Tensor &dst) {
  // Synchronous: the host buffer may go as soon as this returns.
  check(cudaMemcpyAsync(dst.rawData(), host.rawData(), host.numBytes(),
                        cudaMemcpyHostToDevice, compute),
        "copying to the GPU");
  check(cudaStreamSynchronize(compute), "copying to the GPU");
}

void CudaDevice::copyToHost(const Tensor &src, Tensor &host) {
  check(cudaMemcpyAsync(host.rawData(), src.rawData(), src.numBytes(),
                        cudaMemcpyDeviceToHost, compute),
        "copying from the GPU");
  check(cudaStreamSynchronize(compute), "copying from the GPU");
}

void CudaDevice::copy(const Tensor &src, Tensor &dst) {
  if (src.rawData() != dst.rawData() && src.numBytes())
    check(cudaMemcpyAsync(dst.rawData(), src.rawData(), src.numBytes(),
                          cudaMemcpyDeviceToDevice, compute),
          "cudaMemcpyAsync");
}

void CudaDevice::zero(Tensor &t) {
  if (t.numBytes())
    check(cudaMemsetAsync(t.rawData(), 0, t.numBytes(), compute),
          "cudaMemsetAsync");
}

void CudaDevice::fillBytes(Tensor &t, unsigned char byte) {
  if (t.memory() == MemoryKind::Host)
    return Device::fillBytes(t, byte);
  if (t.numBytes())
    check(cudaMemsetAsync(t.rawData(), byte, t.numBytes(), compute),
          "cudaMemsetAsync");
}

void CudaDevice::synchronize() {
  check(cudaStreamSynchronize(compute), "running the program");
  int bad = 0;
  check(cudaMemcpy(&bad, flag, sizeof(int), cudaMemcpyDeviceToHost),
        "reading the error flag");
  if (bad) {
    check(cudaMemset(flag, 0, sizeof(int)), "cudaMemset");
    throw Error("Gather: an index is out of range");
  }
}

void CudaDevice::addInto(Tensor &acc, const Tensor &x) {
  if (acc.dtype() != DType::F32 && acc.dtype() != DType::I64 &&
      acc.dtype() != DType::I32) {
    Device::addInto(acc, x);
    return;
  }
  cuda::binary(arith::BinaryOp::Add, acc.dtype(), acc.rawData(), acc.shape(),
               x.rawData(), x.shape(), acc.rawData(), acc.shape(), compute);
}

void *CudaDevice::workspace(std::size_t bytes) {
  if (bytes > scratchSize) {
    check(cudaStreamSynchronize(compute), "growing the workspace");
    cudaFree(scratch);
    scratch = nullptr;
    check(cudaMalloc(&scratch, bytes), "allocating the workspace");
    scratchSize = bytes;
  }
  return scratch;
}

std::unique_ptr<Device> shoal::rt::makeCudaDevice(int localRank,
                                                  Precision matmul) {
  return std::make_unique<CudaDevice>(localRank, matmul);
}
