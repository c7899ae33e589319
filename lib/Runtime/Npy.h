//===- Npy.h - Reading and writing NumPy .npy files -------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Program inputs and outputs are `.npy` files (format versions 1 and 2,
// little-endian, C order) of the dtypes the runtime supports: float32,
// float64, float16, int64, int32, int8, uint8 and bool. numpy has no
// bfloat16: a bf16 value is written as float32 (exactly), and a bf16 input
// may be given as float32 (rounded to the nearest bf16, ties to even) or as
// two raw bytes per element ('<V2', how numpy saves ml_dtypes.bfloat16).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_NPY_H
#define SHOAL_RUNTIME_NPY_H

#include "Tensor.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace shoal {
namespace rt {

/// What the header of a .npy file says.
struct NpyHeader {
  TensorType type;
  /// Offset of the first data byte in the file.
  std::size_t dataOffset = 0;
};

/// Parses and checks the .npy file held in `data[0, size)`: magic, version,
/// dtype, C order, and that the data is exactly as long as the shape says.
/// Throws Error naming `path` otherwise.
NpyHeader parseNpyHeader(const uint8_t *data, std::size_t size,
                         const std::string &path);

/// Whether a .npy array of type `file` may feed a value of type `want`:
/// the same type, or float32 for bf16 (see convertNpyData).
bool npyFeeds(const TensorType &file, const TensorType &want);

/// The elements of a .npy array of type `file` at `data`, converted to
/// `want` where npyFeeds allows a different dtype: float32 to bf16, rounded
/// to nearest even.
Tensor convertNpyData(const uint8_t *data, const TensorType &file, DType want);

/// Reads a whole .npy file.
Tensor readNpy(const std::string &path);

/// Writes `tensor` as a version 1 .npy file (version 2 if the header needs
/// it); bf16 is written as float32. Throws Error naming `path` on I/O errors.
void writeNpy(const std::string &path, const Tensor &tensor);

/// The file stem used for a port called `name`: every character outside
/// [A-Za-z0-9_.-] becomes '_'.
std::string sanitizeName(const std::string &name);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_NPY_H
