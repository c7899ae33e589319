//===- Device.cpp - Defaults of the device interface ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Device.h"

#include "Half.h"
#include "Sharding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

using namespace shoal::rt;

Tensor Device::toHost(const Tensor &t) {
  if (t.onHost())
    return t;
  Tensor host = Tensor::uninitialized(t.type());
  copyToHost(t, host);
  return host;
}

Tensor Device::fromHost(const Tensor &host) {
  if (memory() == MemoryKind::Host)
    return host;
  Tensor t = allocate(host.type());
  copyFromHost(host, t);
  return t;
}

namespace {

template <typename T> void addLoop(Tensor &acc, const Tensor &in) {
  T *a = acc.data<T>();
  const T *b = in.data<T>();
  for (int64_t i = 0, n = acc.numElements(); i < n; ++i)
    a[i] = T(a[i] + b[i]); // 8-bit integers wrap
}

/// 16-bit floats: added in f32, rounded back to nearest even.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void addHalfLoop(Tensor &acc, const Tensor &in) {
  auto *a = static_cast<uint16_t *>(acc.rawData());
  const auto *b = static_cast<const uint16_t *>(in.rawData());
  for (int64_t i = 0, n = acc.numElements(); i < n; ++i)
    a[i] = FromF(ToF(a[i]) + ToF(b[i]));
}

} // namespace

void Device::addInto(Tensor &acc, const Tensor &x) {
  runOnHostCopies(*this, {&acc}, {&x}, [&] {
    switch (acc.dtype()) {
    case DType::F32:
      addLoop<float>(acc, x);
      break;
    case DType::I64:
      addLoop<int64_t>(acc, x);
      break;
    case DType::I32:
      addLoop<int32_t>(acc, x);
      break;
    case DType::F64:
      addLoop<double>(acc, x);
      break;
    case DType::I8:
      addLoop<int8_t>(acc, x);
      break;
    case DType::U8:
      addLoop<uint8_t>(acc, x);
      break;
    case DType::F16:
      addHalfLoop<halfToFloat, floatToHalf>(acc, x);
      break;
    case DType::BF16:
      addHalfLoop<bf16ToFloat, floatToBF16>(acc, x);
      break;
    default:
      throw Error(fmt::format("cannot accumulate {} tensors over "
                              "micro-batches",
                              dtypeName(acc.dtype())));
    }
  });
}

void Device::concatBlocks(const Tensor &blocks, int64_t n, int64_t dim,
                          Tensor &out) {
  runOnHostCopies(*this, {&out}, {&blocks},
                  [&] { rt::concatBlocks(blocks.bytes(), n, dim, out); });
}

void Device::packBlocks(const Tensor &in, int64_t n, int64_t dim,
                        Tensor &packed) {
  runOnHostCopies(*this, {&packed}, {&in}, [&] {
    const Shape &s = in.shape();
    int64_t size = s[dim], block = (size + n - 1) / n, outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d)
      outer *= s[d];
    for (std::size_t d = dim + 1; d < s.size(); ++d)
      inner *= s[d];
    std::size_t elem = dtypeSize(in.dtype());
    std::memset(packed.rawData(), 0, packed.numBytes());
    for (int64_t j = 0; j < n; ++j) {
      int64_t rows = std::min(block, size - j * block);
      for (int64_t o = 0; rows > 0 && o < outer; ++o)
        std::memcpy(packed.bytes() + ((j * outer + o) * block * inner) * elem,
                    in.bytes() + ((o * size + j * block) * inner) * elem,
                    static_cast<std::size_t>(rows * inner) * elem);
    }
  });
}

void shoal::rt::runOnHostCopies(Device &dev,
                                std::initializer_list<Tensor *> written,
                                std::initializer_list<const Tensor *> read,
                                const std::function<void()> &f) {
  if (dev.memory() == MemoryKind::Host) {
    f();
    return;
  }
  std::vector<std::pair<Tensor *, Tensor>> saved;
  for (Tensor *t : written)
    if (t->defined())
      saved.emplace_back(t, *t), *t = dev.toHost(*t);
  std::vector<std::pair<Tensor *, Tensor>> savedRead;
  for (const Tensor *t : read) {
    auto *m = const_cast<Tensor *>(t);
    if (m->defined())
      savedRead.emplace_back(m, *m), *m = dev.toHost(*m);
  }
  f();
  for (auto &[t, orig] : saved) {
    dev.copyFromHost(*t, orig);
    *t = orig;
  }
  for (auto &[t, orig] : savedRead)
    *t = orig;
}

void Device::fillBytes(Tensor &t, unsigned char byte) {
  if (t.memory() == MemoryKind::Host && t.numBytes())
    std::memset(t.rawData(), byte, t.numBytes());
}
