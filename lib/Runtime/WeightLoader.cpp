//===- WeightLoader.cpp - Loading weight slices from ONNX files -*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "WeightLoader.h"
#include "Half.h"

#include "Sharding.h"
#include "shoal/Schema/WeightDigest.h"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <onnx/onnx_pb.h>
#include <openssl/evp.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <set>

using namespace shoal::rt;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

namespace {

// Field numbers of onnx.proto used here.
constexpr uint32_t kModelGraph = 7;
constexpr uint32_t kGraphInitializer = 5;
constexpr uint32_t kTensorDims = 1;
constexpr uint32_t kTensorDataType = 2;
constexpr uint32_t kTensorSegment = 3;
constexpr uint32_t kTensorFloatData = 4;
constexpr uint32_t kTensorInt32Data = 5;
constexpr uint32_t kTensorStringData = 6;
constexpr uint32_t kTensorInt64Data = 7;
constexpr uint32_t kTensorName = 8;
constexpr uint32_t kTensorRawData = 9;
constexpr uint32_t kTensorDoubleData = 10;
constexpr uint32_t kTensorUint64Data = 11;
constexpr uint32_t kTensorExternalData = 13;
constexpr uint32_t kTensorDataLocation = 14;
constexpr uint32_t kEntryKey = 1;
constexpr uint32_t kEntryValue = 2;

constexpr uint32_t kVarint = WireFormatLite::WIRETYPE_VARINT;
constexpr uint32_t kLengthDelimited = WireFormatLite::WIRETYPE_LENGTH_DELIMITED;

// ONNX TensorProto.DataType values.
constexpr int32_t kOnnxFloat = 1;
constexpr int32_t kOnnxUInt8 = 2;
constexpr int32_t kOnnxInt8 = 3;
constexpr int32_t kOnnxInt32 = 6;
constexpr int32_t kOnnxInt64 = 7;
constexpr int32_t kOnnxBool = 9;
constexpr int32_t kOnnxFloat16 = 10;
constexpr int32_t kOnnxDouble = 11;
constexpr int32_t kOnnxBFloat16 = 16;

} // namespace

const char *shoal::rt::onnxTypeName(int32_t t) {
  static const char *names[] = {
      "UNDEFINED", "FLOAT",  "UINT8",     "INT8",       "UINT16",  "INT16",
      "INT32",     "INT64",  "STRING",    "BOOL",       "FLOAT16", "DOUBLE",
      "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
  if (t >= 0 && t < static_cast<int32_t>(sizeof(names) / sizeof(names[0])))
    return names[t];
  return "unknown";
}

bool shoal::rt::onnxToDType(int32_t t, DType &dtype) {
  switch (t) {
  case kOnnxFloat:
    dtype = DType::F32;
    return true;
  case kOnnxInt32:
    dtype = DType::I32;
    return true;
  case kOnnxInt64:
    dtype = DType::I64;
    return true;
  case kOnnxBool:
    dtype = DType::Bool;
    return true;
  case kOnnxUInt8:
    dtype = DType::U8;
    return true;
  case kOnnxInt8:
    dtype = DType::I8;
    return true;
  case kOnnxFloat16:
    dtype = DType::F16;
    return true;
  case kOnnxBFloat16:
    dtype = DType::BF16;
    return true;
  case kOnnxDouble:
    dtype = DType::F64;
    return true;
  default:
    return false;
  }
}

namespace {

/// Parses a decimal byte count as written in external_data ("0", "4096").
bool parseByteCount(const std::string &text, uint64_t &value) {
  if (text.empty() || text.size() > 19)
    return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  value = v;
  return true;
}

/// Walks the wire format of a ModelProto held in memory.
class ModelScanner {
public:
  ModelScanner(const uint8_t *data, std::size_t size, const std::string &path,
               std::unordered_map<std::string, InitializerInfo> &index)
      : in(data, static_cast<int>(size)), size(size), path(path), index(index) {
    in.SetRecursionLimit(INT_MAX);
  }

  void scanModel() {
    bool sawGraph = false;
    while (uint32_t tag = in.ReadTag()) {
      uint32_t field = WireFormatLite::GetTagFieldNumber(tag);
      uint32_t wire = WireFormatLite::GetTagWireType(tag);
      if (field == kModelGraph) {
        expectWire(wire, kLengthDelimited, "ModelProto.graph");
        int len = readLength("ModelProto.graph");
        auto limit = in.PushLimit(len);
        scanGraph();
        in.PopLimit(limit);
        sawGraph = true;
      } else {
        skip(tag, "ModelProto");
      }
    }
    if (static_cast<std::size_t>(in.CurrentPosition()) != size)
      corrupt("invalid field tag");
    if (!sawGraph)
      throw Error(fmt::format("weight file {} is not an ONNX model (no graph "
                              "found)",
                              path));
  }

private:
  [[noreturn]] void corrupt(const std::string &why) {
    throw Error(fmt::format("weight file {} is not a valid ONNX model or is "
                            "truncated ({} at byte {})",
                            path, why, in.CurrentPosition()));
  }
  void expectWire(uint32_t wire, uint32_t expected, const char *field) {
    if (wire != expected)
      corrupt(fmt::format("{} has wire type {}", field, wire));
  }
  int readLength(const char *field) {
    uint32_t len;
    if (!in.ReadVarint32(&len))
      corrupt(fmt::format("cannot read the length of {}", field));
    int left = in.BytesUntilLimit();
    if (len > static_cast<uint32_t>(INT_MAX) ||
        (left >= 0 && static_cast<int64_t>(len) > left))
      corrupt(fmt::format("{} of {} bytes runs past its end", field, len));
    return static_cast<int>(len);
  }
  void skip(uint32_t tag, const char *message) {
    if (!WireFormatLite::SkipField(&in, tag))
      corrupt(fmt::format("cannot skip field {} of {}",
                          WireFormatLite::GetTagFieldNumber(tag), message));
  }

  void scanGraph() {
    while (uint32_t tag = in.ReadTag()) {
      uint32_t field = WireFormatLite::GetTagFieldNumber(tag);
      uint32_t wire = WireFormatLite::GetTagWireType(tag);
      if (field == kGraphInitializer) {
        expectWire(wire, kLengthDelimited, "GraphProto.initializer");
        int len = readLength("GraphProto.initializer");
        InitializerInfo info;
        info.messageOffset = static_cast<uint64_t>(in.CurrentPosition());
        info.messageSize = static_cast<uint64_t>(len);
        auto limit = in.PushLimit(len);
        scanTensor(info);
        in.PopLimit(limit);
        // Initializer names are unique in a valid model; keep the first.
        std::string name = info.name;
        index.emplace(std::move(name), std::move(info));
      } else {
        skip(tag, "GraphProto");
      }
    }
    if (in.BytesUntilLimit() != 0)
      corrupt("invalid field tag in GraphProto");
  }

  void scanTensor(InitializerInfo &info) {
    while (uint32_t tag = in.ReadTag()) {
      uint32_t field = WireFormatLite::GetTagFieldNumber(tag);
      uint32_t wire = WireFormatLite::GetTagWireType(tag);
      switch (field) {
      case kTensorDims:
        if (wire == kVarint) {
          uint64_t d;
          if (!in.ReadVarint64(&d))
            corrupt("bad TensorProto.dims");
          info.dims.push_back(static_cast<int64_t>(d));
        } else {
          expectWire(wire, kLengthDelimited, "TensorProto.dims");
          int len = readLength("TensorProto.dims");
          auto limit = in.PushLimit(len);
          while (in.BytesUntilLimit() > 0) {
            uint64_t d;
            if (!in.ReadVarint64(&d))
              corrupt("bad packed TensorProto.dims");
            info.dims.push_back(static_cast<int64_t>(d));
          }
          in.PopLimit(limit);
        }
        break;
      case kTensorDataType: {
        expectWire(wire, kVarint, "TensorProto.data_type");
        uint32_t t;
        if (!in.ReadVarint32(&t))
          corrupt("bad TensorProto.data_type");
        info.dataType = static_cast<int32_t>(t);
        break;
      }
      case kTensorName: {
        expectWire(wire, kLengthDelimited, "TensorProto.name");
        int len = readLength("TensorProto.name");
        if (!in.ReadString(&info.name, len))
          corrupt("bad TensorProto.name");
        break;
      }
      case kTensorRawData: {
        expectWire(wire, kLengthDelimited, "TensorProto.raw_data");
        int len = readLength("TensorProto.raw_data");
        info.hasRawData = true;
        info.rawOffset = static_cast<uint64_t>(in.CurrentPosition());
        info.rawSize = static_cast<uint64_t>(len);
        if (!in.Skip(len))
          corrupt("TensorProto.raw_data runs past the end");
        break;
      }
      case kTensorFloatData:
      case kTensorInt32Data:
      case kTensorStringData:
      case kTensorInt64Data:
      case kTensorDoubleData:
      case kTensorUint64Data:
        info.hasTypedData = true;
        skip(tag, "TensorProto");
        break;
      case kTensorExternalData: {
        expectWire(wire, kLengthDelimited, "TensorProto.external_data");
        int len = readLength("TensorProto.external_data");
        auto limit = in.PushLimit(len);
        scanExternalDataEntry(info);
        in.PopLimit(limit);
        info.external = true;
        break;
      }
      case kTensorDataLocation: {
        expectWire(wire, kVarint, "TensorProto.data_location");
        uint32_t loc;
        if (!in.ReadVarint32(&loc))
          corrupt("bad TensorProto.data_location");
        if (loc == 1)
          info.external = true;
        break;
      }
      case kTensorSegment:
        info.segmented = true;
        skip(tag, "TensorProto");
        break;
      default:
        skip(tag, "TensorProto");
        break;
      }
    }
    if (in.BytesUntilLimit() != 0)
      corrupt("invalid field tag in TensorProto");
  }

  /// One StringStringEntryProto {1: key, 2: value} of external_data.
  void scanExternalDataEntry(InitializerInfo &info) {
    std::string key, value;
    while (uint32_t tag = in.ReadTag()) {
      uint32_t field = WireFormatLite::GetTagFieldNumber(tag);
      uint32_t wire = WireFormatLite::GetTagWireType(tag);
      if (field == kEntryKey || field == kEntryValue) {
        const char *what = field == kEntryKey ? "StringStringEntryProto.key"
                                              : "StringStringEntryProto.value";
        expectWire(wire, kLengthDelimited, what);
        int len = readLength(what);
        if (!in.ReadString(field == kEntryKey ? &key : &value, len))
          corrupt(fmt::format("bad {}", what));
      } else {
        skip(tag, "StringStringEntryProto");
      }
    }
    if (in.BytesUntilLimit() != 0)
      corrupt("invalid field tag in StringStringEntryProto");
    // The last entry of a key wins; "checksum" and other keys are ignored.
    if (key == "location") {
      info.externalLocation = std::move(value);
    } else if (key == "offset") {
      info.hasExternalOffset = true;
      info.externalOffset = std::move(value);
    } else if (key == "length") {
      info.hasExternalLength = true;
      info.externalLength = std::move(value);
    }
  }

  CodedInputStream in;
  std::size_t size;
  const std::string &path;
  std::unordered_map<std::string, InitializerInfo> &index;
};

} // namespace

OnnxWeightFile::OnnxWeightFile(const std::string &path)
    : file(path, "weight file") {
  indexModel();
}

void OnnxWeightFile::indexModel() {
  if (file.size() == 0)
    throw Error(fmt::format("weight file {} is empty", file.path()));
  if (file.size() > static_cast<std::size_t>(INT_MAX))
    throw Error(fmt::format("weight file {} is larger than 2 GiB, the limit "
                            "of a protobuf message; weights over 2 GiB must "
                            "be stored as ONNX external data (e.g. "
                            "onnx.save_model(..., save_as_external_data="
                            "True)), which is supported",
                            file.path()));
  ModelScanner(file.data(), file.size(), file.path(), index).scanModel();
}

const MappedFile &
OnnxWeightFile::externalFile(const InitializerInfo &info) const {
  namespace fs = std::filesystem;
  const std::string &loc = info.externalLocation;
  auto refuse = [&](const std::string &why) -> Error {
    return Error(fmt::format("initializer '{}' in {} has external data "
                             "location '{}', {}",
                             info.name, path(), loc, why));
  };
  if (loc.empty())
    throw Error(fmt::format("initializer '{}' in {} stores its data "
                            "externally but its external_data has no "
                            "'location'",
                            info.name, path()));
  fs::path rel(loc);
  if (rel.is_absolute() || rel.has_root_name() || rel.has_root_directory())
    throw refuse("which is an absolute path; external data must lie in the "
                 "model's folder, at a relative location");
  fs::path dir = fs::path(path()).parent_path();
  if (dir.empty())
    dir = ".";
  fs::path canonDir, canonFile;
  try {
    canonDir = fs::weakly_canonical(dir);
    canonFile = fs::weakly_canonical(dir / rel);
  } catch (const fs::filesystem_error &e) {
    throw refuse(fmt::format("which cannot be resolved: {}", e.what()));
  }
  fs::path normal = rel.lexically_normal();
  if (!normal.empty() && *normal.begin() == "..")
    throw refuse(
        fmt::format("which leaves the model's folder {}", canonDir.string()));
  // The resolved file must lie inside the resolved folder (a symbolic link
  // may point elsewhere).
  auto d = canonDir.begin(), f = canonFile.begin();
  while (d != canonDir.end() && f != canonFile.end() && *d == *f) {
    ++d;
    ++f;
  }
  if (d != canonDir.end())
    throw refuse(fmt::format("which resolves to {}, outside the model's "
                             "folder {}",
                             canonFile.string(), canonDir.string()));
  std::string key = canonFile.string();
  auto it = externalFiles.find(key);
  if (it != externalFiles.end())
    return it->second;
  try {
    // Map the path that was checked, with every link resolved.
    MappedFile mapped(key, "external data file");
    return externalFiles.emplace(key, std::move(mapped)).first->second;
  } catch (const Error &e) {
    throw Error(fmt::format("initializer '{}' in {} (external data location "
                            "'{}'): {}",
                            info.name, path(), loc, e.what()));
  }
}

const InitializerInfo *OnnxWeightFile::find(const std::string &name) const {
  auto it = index.find(name);
  return it == index.end() ? nullptr : &it->second;
}

Tensor OnnxWeightFile::loadBlock(const std::string &name,
                                 const TensorType &global, const Shape &offsets,
                                 const Shape &local,
                                 const Shape &sourceShape) const {
  const InitializerInfo *info = find(name);
  if (!info)
    throw Error(fmt::format("initializer '{}' not found in weight file {} "
                            "(it has {} initializers)",
                            name, path(), index.size()));
  DType dtype;
  if (!onnxToDType(info->dataType, dtype))
    throw Error(fmt::format("initializer '{}' in {} has ONNX data type {} "
                            "({}), but the plan expects {}",
                            name, path(), info->dataType,
                            onnxTypeName(info->dataType), global.str()));
  // A float32 master weight of a model stored in bf16 or f16 (shoal-compile
  // trains such a model on float32 copies): read as stored, widened
  // exactly.
  if (global.dtype == DType::F32 &&
      (dtype == DType::BF16 || dtype == DType::F16)) {
    Tensor half = loadBlock(name, TensorType{dtype, global.shape}, offsets,
                            local, sourceShape);
    Tensor wide(DType::F32, local);
    const auto *h = static_cast<const uint16_t *>(half.rawData());
    float *f = wide.data<float>();
    for (int64_t i = 0, n = wide.numElements(); i < n; ++i)
      f[i] = dtype == DType::BF16 ? bf16ToFloat(h[i]) : halfToFloat(h[i]);
    return wide;
  }
  // A viewed weight (sourceShape given) is read in the plan's shape: the
  // same elements in the same row-major order.
  TensorType actual{dtype, info->dims};
  TensorType expected{global.dtype,
                      sourceShape.empty() ? global.shape : sourceShape};
  if (actual != expected)
    throw Error(fmt::format("initializer '{}' in {} is {}, but the plan "
                            "expects {}",
                            name, path(), actual.str(), expected.str()));
  for (int64_t d : info->dims)
    if (d < 0)
      throw Error(fmt::format("initializer '{}' in {} has a negative "
                              "dimension",
                              name, path()));
  if (info->segmented)
    throw Error(fmt::format("initializer '{}' in {} uses TensorProto.segment, "
                            "which is not supported",
                            name, path()));
  std::size_t elem = dtypeSize(dtype);
  Tensor out(dtype, local);
  if (info->external) {
    // Raw little-endian bytes in a side file (the only encoding ONNX allows
    // there), at `offset` (default 0) for `length` bytes (default: the
    // tensor's size).
    const MappedFile &ext = externalFile(*info);
    uint64_t offset = 0, length = global.numBytes();
    if (info->hasExternalOffset &&
        !parseByteCount(info->externalOffset, offset))
      throw Error(fmt::format("initializer '{}' in {} has external data "
                              "offset '{}', which is not a byte count",
                              name, path(), info->externalOffset));
    if (info->hasExternalLength &&
        !parseByteCount(info->externalLength, length))
      throw Error(fmt::format("initializer '{}' in {} has external data "
                              "length '{}', which is not a byte count",
                              name, path(), info->externalLength));
    if (offset > ext.size() || length > ext.size() - offset)
      throw Error(fmt::format("initializer '{}' in {}: its external data at "
                              "offset {} of length {} runs past the end of {} "
                              "({} bytes)",
                              name, path(), offset, length, ext.path(),
                              ext.size()));
    if (length != global.numBytes())
      throw Error(fmt::format("initializer '{}' in {} has {} bytes of "
                              "external data in {}, but a {} tensor needs {}",
                              name, path(), length, ext.path(), global.str(),
                              global.numBytes()));
    if (out.numElements() > 0)
      extractBlock(ext.data() + offset, global.shape, elem, offsets, local,
                   out.rawData());
  } else if (info->hasRawData) {
    if (info->rawSize != global.numBytes())
      throw Error(fmt::format("initializer '{}' in {} has {} bytes of "
                              "raw_data, but a {} tensor needs {}",
                              name, path(), info->rawSize, global.str(),
                              global.numBytes()));
    extractBlock(file.data() + info->rawOffset, global.shape, elem, offsets,
                 local, out.rawData());
  } else {
    // Typed fields: parse this one TensorProto.
    onnx::TensorProto proto;
    if (!proto.ParseFromArray(file.data() + info->messageOffset,
                              static_cast<int>(info->messageSize)))
      throw Error(
          fmt::format("initializer '{}' in {} cannot be parsed", name, path()));
    int64_t n = global.numElements();
    const void *src = nullptr;
    // Elements narrower than int32 come in int32_data, one per entry (f16
    // and bf16 as their bit patterns, as ONNX stores them).
    std::vector<uint8_t> bytes;
    std::vector<uint16_t> halves;
    int64_t count = 0;
    switch (dtype) {
    case DType::F32:
      count = proto.float_data_size();
      src = proto.float_data().data();
      break;
    case DType::F64:
      count = proto.double_data_size();
      src = proto.double_data().data();
      break;
    case DType::I64:
      count = proto.int64_data_size();
      src = proto.int64_data().data();
      break;
    case DType::I32:
      count = proto.int32_data_size();
      src = proto.int32_data().data();
      break;
    case DType::Bool:
    case DType::I8:
    case DType::U8:
      count = proto.int32_data_size();
      for (int32_t v : proto.int32_data())
        bytes.push_back(dtype == DType::Bool ? v != 0
                                             : static_cast<uint8_t>(v));
      src = bytes.data();
      break;
    case DType::F16:
    case DType::BF16:
      count = proto.int32_data_size();
      for (int32_t v : proto.int32_data())
        halves.push_back(static_cast<uint16_t>(v));
      src = halves.data();
      break;
    }
    if (count != n)
      throw Error(fmt::format("initializer '{}' in {} has {} elements of "
                              "data, but a {} tensor needs {}",
                              name, path(), count, global.str(), n));
    if (n > 0)
      extractBlock(src, global.shape, elem, offsets, local, out.rawData());
  }
  if (dtype == DType::Bool) {
    uint8_t *b = out.data<uint8_t>();
    for (int64_t i = 0, e = out.numElements(); i < e; ++i)
      b[i] = b[i] != 0;
  }
  return out;
}

uint64_t shoal::rt::tensorDigest(int32_t dataType, const Shape &dims,
                                 const uint8_t *data, uint64_t size) {
  constexpr uint64_t kBlock = 4096, kBlocks = 16;
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX *)> ctx(EVP_MD_CTX_new(),
                                                          &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw Error("cannot start a SHA-256 digest (OpenSSL)");
  auto add = [&](const void *p, std::size_t n) {
    EVP_DigestUpdate(ctx.get(), p, n);
  };
  auto addInt = [&](int64_t v) {
    uint8_t le[8];
    for (int i = 0; i < 8; ++i)
      le[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
    add(le, 8);
  };
  addInt(dataType);
  addInt(static_cast<int64_t>(dims.size()));
  for (int64_t d : dims)
    addInt(d);
  addInt(static_cast<int64_t>(size));
  if (size <= kBlock * kBlocks) {
    add(data, size);
  } else {
    for (uint64_t i = 0; i < kBlocks; ++i)
      add(data + (size - kBlock) / (kBlocks - 1) * i, kBlock);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  uint64_t out = 0;
  for (int i = 7; i >= 0; --i)
    out = (out << 8) | md[i];
  return out;
}

uint64_t OnnxWeightFile::digest(const std::string &name) const {
  const InitializerInfo *info = find(name);
  if (!info)
    throw Error(fmt::format("{} has no initializer '{}'", path(), name));
  if (info->external) {
    DType dtype;
    if (!onnxToDType(info->dataType, dtype))
      throw Error(fmt::format("initializer '{}' in {} has ONNX data type {} "
                              "({}), which shoal does not read",
                              name, path(), info->dataType,
                              onnxTypeName(info->dataType)));
    const MappedFile &ext = externalFile(*info);
    uint64_t offset = 0, length = TensorType{dtype, info->dims}.numBytes();
    if ((info->hasExternalOffset &&
         !parseByteCount(info->externalOffset, offset)) ||
        (info->hasExternalLength &&
         !parseByteCount(info->externalLength, length)) ||
        offset > ext.size() || length > ext.size() - offset)
      throw Error(fmt::format("initializer '{}' in {}: its external data "
                              "(offset '{}', length '{}') is not within {} "
                              "({} bytes)",
                              name, path(), info->externalOffset,
                              info->externalLength, ext.path(), ext.size()));
    return tensorDigest(info->dataType, info->dims, ext.data() + offset,
                        length);
  }
  if (info->hasRawData) {
    if (info->rawOffset > file.size() ||
        info->rawSize > file.size() - info->rawOffset)
      throw Error(fmt::format("initializer '{}' in {}: its raw_data runs "
                              "past the end of the file",
                              name, path()));
    return tensorDigest(info->dataType, info->dims,
                        file.data() + info->rawOffset, info->rawSize);
  }
  // Typed fields: the same little-endian bytes loadInitializer makes.
  Tensor whole = loadInitializer(name);
  return tensorDigest(info->dataType, info->dims,
                      static_cast<const uint8_t *>(whole.rawData()),
                      whole.numBytes());
}

Tensor OnnxWeightFile::loadInitializer(const std::string &name) const {
  const InitializerInfo *info = find(name);
  DType dtype = DType::F32;
  if (info && !onnxToDType(info->dataType, dtype))
    throw Error(fmt::format("initializer '{}' in {} has ONNX data type {} "
                            "({}), which shoal does not read",
                            name, path(), info->dataType,
                            onnxTypeName(info->dataType)));
  Shape dims = info ? info->dims : Shape();
  return loadBlock(name, {dtype, dims}, Shape(dims.size(), 0), dims);
}

//===----------------------------------------------------------------------===//
// OnnxWeightDigests (include/shoal/Schema/WeightDigest.h)
//===----------------------------------------------------------------------===//

struct shoal::rt::OnnxWeightDigests::Impl {
  explicit Impl(const std::string &path) : file(path) {}
  OnnxWeightFile file;
};

shoal::rt::OnnxWeightDigests::OnnxWeightDigests(std::string path)
    : path(std::move(path)) {}

shoal::rt::OnnxWeightDigests::~OnnxWeightDigests() = default;

uint64_t shoal::rt::OnnxWeightDigests::digest(const std::string &name) {
  if (!impl)
    impl = std::make_unique<Impl>(path);
  return impl->file.digest(name);
}

std::vector<std::string> OnnxWeightFile::externalLocations() const {
  namespace fs = std::filesystem;
  std::set<std::string> seen;
  std::vector<std::string> out;
  fs::path folder = fs::path(path()).parent_path();
  for (const auto &[name, info] : index)
    if (info.external && !info.externalLocation.empty()) {
      std::string p =
          (folder / info.externalLocation).lexically_normal().string();
      if (seen.insert(p).second)
        out.push_back(p);
    }
  std::sort(out.begin(), out.end());
  return out;
}
