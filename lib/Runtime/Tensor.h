//===- Tensor.h - Dense tensors of the CPU runtime --------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A Tensor is a dtype, a shape and a reference-counted, 64-byte aligned
// buffer in row-major (C) order. Copies share the buffer; Reshape uses that
// to alias its input.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_TENSOR_H
#define SHOAL_RUNTIME_TENSOR_H

#include "shoal/Runtime/Error.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shoal {
namespace rt {

/// Element types the runtime computes with. BF16 and F16 are stored as
/// their 16-bit patterns (uint16_t) and computed in f32 on the CPU.
enum class DType : uint8_t { F32, I64, I32, Bool, F16, BF16, F64, I8, U8 };

/// Bytes per element.
std::size_t dtypeSize(DType dtype);
/// Short name used in messages: f32, i64, i32, bool, f16, bf16, f64, i8, u8.
const char *dtypeName(DType dtype);

using Shape = std::vector<int64_t>;

/// Product of the dimensions (1 for a scalar). Shapes are validated when a
/// plan or file is read, so this does not check for overflow.
int64_t numElements(const Shape &shape);

/// The size in bytes of a tensor of `dtype` and `shape`, computed without
/// overflow; false when a dimension is negative or the size is over 2^62
/// bytes. Readers of shapes from files check them with this.
bool checkedByteSize(DType dtype, const Shape &shape, uint64_t &bytes);
/// `[2, 3]`, or `[]` for a scalar.
std::string formatShape(const Shape &shape);

/// The type of a value: dtype and shape.
struct TensorType {
  DType dtype = DType::F32;
  Shape shape;

  int64_t numElements() const { return rt::numElements(shape); }
  std::size_t numBytes() const {
    return static_cast<std::size_t>(numElements()) * dtypeSize(dtype);
  }
  /// `f32[2, 3]`.
  std::string str() const;
  bool operator==(const TensorType &other) const {
    return dtype == other.dtype && shape == other.shape;
  }
  bool operator!=(const TensorType &other) const { return !(*this == other); }
};

/// Maps C++ element types to DType for Tensor::data<T>(): `value`, and
/// `other`, a second dtype stored as the same C++ type (else `value`).
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> {
  static constexpr DType value = DType::F32, other = DType::F32;
};
template <> struct DTypeOf<double> {
  static constexpr DType value = DType::F64, other = DType::F64;
};
template <> struct DTypeOf<int64_t> {
  static constexpr DType value = DType::I64, other = DType::I64;
};
template <> struct DTypeOf<int32_t> {
  static constexpr DType value = DType::I32, other = DType::I32;
};
template <> struct DTypeOf<int8_t> {
  static constexpr DType value = DType::I8, other = DType::I8;
};
/// BOOL elements are stored as one byte each, 0 or 1; U8 as uint8_t too.
template <> struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::Bool, other = DType::U8;
};
/// F16 and BF16 elements are their bit patterns (Half.h converts them).
template <> struct DTypeOf<uint16_t> {
  static constexpr DType value = DType::F16, other = DType::BF16;
};

/// Where a tensor's buffer is.
enum class MemoryKind : uint8_t { Host, Cuda };

/// A dense row-major tensor with a shared, owning buffer.
class Tensor {
public:
  /// An undefined tensor (no buffer).
  Tensor() = default;
  /// A zero-filled host tensor of the given type.
  Tensor(DType dtype, Shape shape);
  explicit Tensor(const TensorType &type) : Tensor(type.dtype, type.shape) {}

  /// A host tensor whose elements are not initialized (buffers that are
  /// overwritten whole before they are read).
  static Tensor uninitialized(const TensorType &type);
  /// A tensor over `storage`, which the tensor shares (an arena view made
  /// with shared_ptr's aliasing constructor, or a device allocation).
  static Tensor view(const TensorType &type, std::shared_ptr<uint8_t> storage,
                     MemoryKind where = MemoryKind::Host);

  /// A tensor of shape `shape` that shares `base`'s buffer; the element
  /// counts must agree.
  static Tensor alias(const Tensor &base, Shape shape);

  bool defined() const { return storage != nullptr; }
  DType dtype() const { return elemType; }
  const Shape &shape() const { return dims; }
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t numElements() const { return rt::numElements(dims); }
  std::size_t numBytes() const {
    return static_cast<std::size_t>(numElements()) * dtypeSize(elemType);
  }
  TensorType type() const { return {elemType, dims}; }
  MemoryKind memory() const { return where; }
  bool onHost() const { return where == MemoryKind::Host; }

  /// The shared buffer (for views into it).
  const std::shared_ptr<uint8_t> &storageHandle() const { return storage; }

  void *rawData() { return storage.get(); }
  const void *rawData() const { return storage.get(); }
  uint8_t *bytes() { return static_cast<uint8_t *>(rawData()); }
  const uint8_t *bytes() const {
    return static_cast<const uint8_t *>(rawData());
  }

  /// Typed access to a host tensor; throws Error if T does not match the
  /// dtype or the buffer is device memory.
  template <typename T> T *data() {
    checkElementType(DTypeOf<T>::value, DTypeOf<T>::other);
    return static_cast<T *>(rawData());
  }
  template <typename T> const T *data() const {
    checkElementType(DTypeOf<T>::value, DTypeOf<T>::other);
    return static_cast<const T *>(rawData());
  }

private:
  void checkElementType(DType requested, DType other) const;

  DType elemType = DType::F32;
  MemoryKind where = MemoryKind::Host;
  Shape dims;
  std::shared_ptr<uint8_t> storage;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_TENSOR_H
