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
// Initializers with external data (TensorProto.external_data, as ONNX writes
// for models over 2 GiB) keep their raw little-endian bytes in a side file
// named by a location relative to the model's folder. Each side file is
// mapped once, on first use, and a slice is copied out of it the same way.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_WEIGHTLOADER_H
#define SHOAL_RUNTIME_WEIGHTLOADER_H

#include "MappedFile.h"
#include "Tensor.h"

#include <cstdint>
#include <map>
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
  /// The external_data entries (key "checksum" and unknown keys are
  /// ignored). `location` is a path relative to the model's folder; `offset`
  /// and `length` are decimal byte counts, recorded as written and parsed by
  /// loadBlock (absent: offset 0, length the tensor's byte size).
  std::string externalLocation;
  bool hasExternalOffset = false, hasExternalLength = false;
  std::string externalOffset, externalLength;
  /// Uses the (deprecated) segment field.
  bool segmented = false;
};

/// The DType of ONNX TensorProto.DataType `t`; false for types shoal does
/// not hold (strings, complex, unsigned 16-64 bit, ...).
bool onnxToDType(int32_t t, DType &dtype);

/// SHA-256 (first 8 bytes, little-endian) of an ONNX data type, dims, byte
/// size and 16 evenly spaced 4 KiB blocks of `data` (all of it when
/// smaller): cheap for 100 GB models, and any retraining or re-export with
/// other weights changes it.
uint64_t tensorDigest(int32_t dataType, const Shape &dims, const uint8_t *data,
                      uint64_t size);
/// `FLOAT`, `INT64`, ... for messages.
const char *onnxTypeName(int32_t t);

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
  /// shape `local` at `offsets` into a new tensor. For external data, maps
  /// the side file on first use (refusing a location that is absolute or
  /// leaves the model's folder) and checks its offset and length. Not
  /// thread-safe (the cache of side files is shared). With `sourceShape`,
  /// the initializer has that shape and `global` views it (same elements,
  /// same row-major order).
  Tensor loadBlock(const std::string &name, const TensorType &global,
                   const Shape &offsets, const Shape &local,
                   const Shape &sourceShape = {}) const;

  /// The whole initializer `name` in its own type (loadBlock of all of it).
  Tensor loadInitializer(const std::string &name) const;

  /// The fingerprint of initializer `name` (tensorDigest of its data,
  /// wherever it is stored), as recorded in a plan's Weight.digest.
  uint64_t digest(const std::string &name) const;

  /// The external data files the model's initializers name (their
  /// `location`s resolved against the model's folder), each once.
  std::vector<std::string> externalLocations() const;

  /// How many distinct external data files have been mapped so far.
  std::size_t numExternalFiles() const { return externalFiles.size(); }

private:
  void indexModel();
  /// The mapped external data file of `info` (checked and mapped on first
  /// use, keyed by its canonical path).
  const MappedFile &externalFile(const InitializerInfo &info) const;

  MappedFile file;
  std::unordered_map<std::string, InitializerInfo> index;
  mutable std::map<std::string, MappedFile> externalFiles;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_WEIGHTLOADER_H
