//===- Tensor.cpp - Dense tensors of the CPU runtime ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

using namespace shoal::rt;

std::size_t shoal::rt::dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::I64:
  case DType::F64:
    return 8;
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::Bool:
  case DType::I8:
  case DType::U8:
    return 1;
  }
  return 1;
}

const char *shoal::rt::dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "f32";
  case DType::I64:
    return "i64";
  case DType::I32:
    return "i32";
  case DType::Bool:
    return "bool";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::F64:
    return "f64";
  case DType::I8:
    return "i8";
  case DType::U8:
    return "u8";
  }
  return "?";
}

int64_t shoal::rt::numElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

bool shoal::rt::checkedByteSize(DType dtype, const Shape &shape,
                                uint64_t &bytes) {
  bytes = dtypeSize(dtype);
  for (int64_t d : shape)
    if (d < 0 ||
        __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) ||
        bytes > (uint64_t(1) << 62))
      return false;
  return true;
}

std::string shoal::rt::formatShape(const Shape &shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string TensorType::str() const {
  return std::string(dtypeName(dtype)) + formatShape(shape);
}

Tensor::Tensor(DType dtype, Shape shape)
    : elemType(dtype), dims(std::move(shape)) {
  // Round up to the alignment (aligned_alloc requires it) and never ask for
  // zero bytes, so that even empty tensors are "defined".
  std::size_t bytes = numBytes();
  std::size_t alloc = (bytes + 63) / 64 * 64;
  if (alloc == 0)
    alloc = 64;
  void *p = std::aligned_alloc(64, alloc);
  if (!p)
    throw Error(fmt::format("out of memory allocating {} bytes for a {} tensor",
                            bytes, type().str()));
  std::memset(p, 0, alloc);
  storage.reset(static_cast<uint8_t *>(p), [](uint8_t *q) { std::free(q); });
}

Tensor Tensor::uninitialized(const TensorType &type) {
  std::size_t bytes = type.numBytes();
  std::size_t alloc = std::max<std::size_t>((bytes + 63) / 64 * 64, 64);
  void *p = std::aligned_alloc(64, alloc);
  if (!p)
    throw Error(fmt::format("out of memory allocating {} bytes for a {} tensor",
                            bytes, type.str()));
  return view(type, std::shared_ptr<uint8_t>(static_cast<uint8_t *>(p),
                                             [](uint8_t *q) { std::free(q); }));
}

Tensor Tensor::view(const TensorType &type, std::shared_ptr<uint8_t> storage,
                    MemoryKind where) {
  Tensor t;
  t.elemType = type.dtype;
  t.dims = type.shape;
  t.storage = std::move(storage);
  t.where = where;
  return t;
}

Tensor Tensor::alias(const Tensor &base, Shape shape) {
  if (rt::numElements(shape) != base.numElements())
    throw Error(fmt::format("cannot view a {} tensor as shape {}",
                            base.type().str(), formatShape(shape)));
  Tensor t;
  t.elemType = base.elemType;
  t.dims = std::move(shape);
  t.storage = base.storage;
  t.where = base.where;
  return t;
}

void Tensor::checkElementType(DType requested, DType other) const {
  if (where != MemoryKind::Host)
    throw Error("internal error: a device tensor accessed on the host");
  if (requested != elemType && other != elemType)
    throw Error(fmt::format("internal error: {} tensor accessed as {}",
                            dtypeName(elemType), dtypeName(requested)));
}
