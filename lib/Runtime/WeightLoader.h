//===- WeightLoader.h - Loading weight slices from ONNX files ---*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Each rank loads only its own slice of each weight. The ONNX file is mapped
// and its protobuf wire format walked without parsing the model: for every
// initializer we record name, dims, data type and where its raw_data bytes
// lie in the file, skipping over them. A slice is then copied straight out of
// the mapping, so only its pages are read from disk.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_WEIGHTLOADER_H
#define SHOAL_RUNTIME_WEIGHTLOADER_H

#include "MappedFile.h"
#include "Tensor.h"

#include <cstdint>
#include <string>
#include <unordered_map>

namespace shoal {
namespace rt {

/// Where an initializer's data lives in the file.
struct InitializerInfo {
  std::string name;
  Shape dims;
  /// ONNX TensorProto.DataType (1 = FLOAT, 6 = INT32, 7 = INT64, 9 = BOOL).
  int32_t dataType = 0;
  /// The TensorProto submessage, for initializers without raw_data.
  uint64_t messageOffset = 0, messageSize = 0;
  bool hasRawData = false;
  uint64_t rawOffset = 0, rawSize = 0;
  /// Stored in float_data, int64_data, ... instead of raw_data.
  bool hasTypedData = false;
  /// data_location is EXTERNAL or external_data is set.
  bool external = false;
  /// Uses the (deprecated) segment field.
  bool segmented = false;
};

/// An ONNX model file opened for reading initializer slices.
class OnnxWeightFile {
public:
  /// Maps and indexes `path`; throws Error naming the file if it is missing,
  /// truncated or not an ONNX model.
  explicit OnnxWeightFile(const std::string &path);

  const std::string &path() const { return file.path(); }
  std::size_t numInitializers() const { return index.size(); }
  /// The initializer called `name`, or null.
  const InitializerInfo *find(const std::string &name) const;

  /// Checks that initializer `name` has type `global` and copies its block of
  /// shape `local` at `offsets` into a new tensor.
  Tensor loadBlock(const std::string &name, const TensorType &global,
                   const Shape &offsets, const Shape &local) const;

private:
  void indexModel();

  MappedFile file;
  std::unordered_map<std::string, InitializerInfo> index;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_WEIGHTLOADER_H
