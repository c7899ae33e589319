//===- CpuDevice.cpp - The CPU device ---------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Host memory; kernels run synchronously on the calling thread (and
// OpenBLAS's). The arena is one 64-byte aligned allocation made when the
// executor is built, so the step loop never allocates: op results are views
// into it, at the offsets the memory plan gave them.
//
//===----------------------------------------------------------------------===//

#include "Device.h"
#include "cpu/Backend.h"

#include <fmt/format.h>

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

using namespace shoal::rt;

namespace {

class CpuDevice : public Device {
public:
  BackendKind kind() const override { return BackendKind::CPU; }
  MemoryKind memory() const override { return MemoryKind::Host; }
  std::string name() const override { return "cpu"; }

  Tensor allocate(const TensorType &type) override {
    allocated += type.numBytes();
    return Tensor(type);
  }

  void reserveArena(std::size_t bytes) override {
    if (arena && bytes <= arenaSize)
      return;
    std::size_t alloc = std::max<std::size_t>((bytes + 63) / 64 * 64, 64);
    void *p = std::aligned_alloc(64, alloc);
    if (!p)
      throw Error(fmt::format("out of memory allocating the {} byte arena of "
                              "op results",
                              bytes));
    // Touch every page now rather than in the first step.
    std::memset(p, 0, alloc);
    arena.reset(static_cast<uint8_t *>(p), [](uint8_t *q) { std::free(q); });
    arenaSize = bytes;
  }

  Tensor arenaView(const TensorType &type, std::size_t offset) override {
    if (offset + type.numBytes() > arenaSize)
      throw Error(fmt::format("internal error: arena view at {} of {} bytes "
                              "past the {} byte arena",
                              offset, type.numBytes(), arenaSize));
    return Tensor::view(type,
                        std::shared_ptr<uint8_t>(arena, arena.get() + offset));
  }

  std::size_t bytesAllocated() const override { return allocated + arenaSize; }

  std::size_t peakBytes() const override {
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<std::size_t>(usage.ru_maxrss) * 1024;
  }

  void copyFromHost(const Tensor &host, Tensor &dst) override {
    copy(host, dst);
  }
  void copyToHost(const Tensor &src, Tensor &host) override { copy(src, host); }
  void copy(const Tensor &src, Tensor &dst) override {
    if (src.numBytes() != dst.numBytes())
      throw Error(fmt::format("internal error: copying {} into {}",
                              src.type().str(), dst.type().str()));
    if (src.rawData() != dst.rawData() && src.numBytes())
      std::memcpy(dst.rawData(), src.rawData(), src.numBytes());
  }
  void zero(Tensor &t) override {
    if (t.numBytes())
      std::memset(t.rawData(), 0, t.numBytes());
  }
  void synchronize() override {}

private:
  std::shared_ptr<uint8_t> arena;
  std::size_t arenaSize = 0;
  std::size_t allocated = 0;
};

} // namespace

std::unique_ptr<Device> shoal::rt::makeCpuDevice() {
  return std::make_unique<CpuDevice>();
}
