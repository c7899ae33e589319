//===- Export.cpp - Writing the trained model -------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "tooling/Export.h"

#include "shoal/Support/Files.h"

#include "Executor.h"
#include "MappedFile.h"
#include "Safetensors.h"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

using namespace shoal::rt;
namespace fs = std::filesystem;

namespace {

/// A file written under a temporary name next to `path` and renamed over it
/// once complete and synced, so that a failed export never leaves a
/// truncated file under the final name (and a symlink there is replaced,
/// never written through).
class OutputFile {
public:
  OutputFile(std::string path, const char *what)
      : file(std::move(path)), what(what) {
    check();
  }

  uint64_t offset() const { return file.size(); }
  void write(const void *data, std::size_t size) {
    file.write(data, size);
    check();
  }
  /// Zero bytes up to `offset`.
  void padTo(uint64_t target) {
    static const char zeros[4096] = {};
    while (offset() < target)
      write(zeros, std::min<uint64_t>(sizeof zeros, target - offset()));
  }
  /// Flushes, syncs and renames the file to its name.
  void commit() {
    file.commit(/*durable=*/true);
    check();
  }

private:
  void check() const {
    if (!file.ok())
      throw Error(fmt::format("cannot write the {} {}", what, file.error()));
  }

  shoal::AtomicFile file;
  const char *what;
};

/// Replaces the data of initializer `t` by `value`: raw_data below
/// kExternalDataThreshold bytes, else appended to `data` (at `location`,
/// relative to the model's folder).
void setInitializerData(onnx::TensorProto &t, const Tensor &value,
                        OutputFile &data, const std::string &location,
                        ExportSummary &summary) {
  t.clear_float_data();
  t.clear_int32_data();
  t.clear_string_data();
  t.clear_int64_data();
  t.clear_double_data();
  t.clear_uint64_data();
  t.clear_raw_data();
  t.clear_external_data();
  t.clear_data_location();
  t.clear_segment();
  uint64_t size = value.numBytes();
  summary.bytes += size;
  if (size < kExternalDataThreshold) {
    t.set_raw_data(value.bytes(), size);
    return;
  }
  uint64_t offset = data.offset();
  if (size >= kAlignThreshold)
    offset = (offset + kAlignment - 1) / kAlignment * kAlignment;
  data.padTo(offset);
  data.write(value.bytes(), size);
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  for (auto [key, text] :
       {std::pair<const char *, std::string>{"location", location},
        {"offset", std::to_string(offset)},
        {"length", std::to_string(size)}}) {
    onnx::StringStringEntryProto *entry = t.add_external_data();
    entry->set_key(key);
    entry->set_value(text);
  }
  ++summary.externalTensors;
}

} // namespace

TrainedModel::TrainedModel(
    const Checkpoint &checkpoint, const std::string &sourcePath,
    std::vector<std::string> names,
    std::map<std::string, std::vector<WeightBlock>> blockMap)
    : ckpt(checkpoint), model([&] {
        std::error_code ec;
        if (!fs::is_regular_file(sourcePath, ec))
          throw Error(fmt::format("the plan's source model {} is gone; the "
                                  "export needs it (its graph, and the "
                                  "initializers' shapes and types)",
                                  sourcePath));
        return OnnxWeightFile(sourcePath);
      }()),
      weights(std::move(names)), blocks(std::move(blockMap)) {
  std::sort(weights.begin(), weights.end());
  const auto &tensors = ckpt.manifest().tensors;
  for (const std::string &name : weights) {
    auto split = blocks.find(name);
    const InitializerInfo *info = model.find(name);
    if (!info)
      throw Error(fmt::format("the source model {} has no initializer '{}', "
                              "a weight of the plan",
                              sourcePath, name));
    TensorType type{DType::F32, info->dims};
    if (!onnxToDType(info->dataType, type.dtype))
      throw Error(fmt::format("initializer '{}' in {} has ONNX data type {} "
                              "({}), which shoal does not write",
                              name, sourcePath, info->dataType,
                              onnxTypeName(info->dataType)));
    if (split != blocks.end()) {
      // Read in blocks: each block is a tensor of the checkpoint, and
      // together they cover the initializer along their axis.
      std::vector<WeightBlock> &parts = split->second;
      std::sort(parts.begin(), parts.end(),
                [](const WeightBlock &a, const WeightBlock &b) {
                  return a.start < b.start;
                });
      int64_t at = 0;
      for (const WeightBlock &b : parts) {
        auto it = tensors.find(b.name);
        if (it == tensors.end())
          throw Error(fmt::format("checkpoint {} has no tensor '{}'",
                                  ckpt.manifestPath(), b.name));
        Shape shape = type.shape;
        bool fits = b.axis >= 0 && b.axis < static_cast<int>(shape.size()) &&
                    b.start == at;
        if (fits)
          shape[b.axis] = b.size;
        if (!fits || it->second.globalType != TensorType{type.dtype, shape})
          throw Error(fmt::format(
              "weight '{}' is {} in checkpoint {}, which is not the block "
              "of initializer '{}' ({}) that starts at {} along axis {}",
              b.name, it->second.globalType.str(), ckpt.manifestPath(), name,
              type.str(), b.start, b.axis));
        at += b.size;
      }
      if (parts.empty() || at != type.shape[parts.front().axis])
        throw Error(fmt::format("the plan reads initializer '{}' ({}) in "
                                "blocks that do not cover it",
                                name, type.str()));
      types.emplace(name, type);
      continue;
    }
    auto it = tensors.find(name);
    if (it == tensors.end())
      throw Error(fmt::format("checkpoint {} has no tensor '{}'",
                              ckpt.manifestPath(), name));
    const TensorType &trained = it->second.globalType;
    if (trained.dtype != type.dtype ||
        trained.numElements() != type.numElements())
      throw Error(fmt::format("weight '{}' is {} in checkpoint {}, which "
                              "does not fit its initializer in {} ({})",
                              name, trained.str(), ckpt.manifestPath(),
                              sourcePath, type.str()));
    types.emplace(name, type);
  }
}

bool TrainedModel::contains(const std::string &name) const {
  return types.count(name) != 0;
}

TensorType TrainedModel::typeOf(const std::string &name) const {
  return types.at(name);
}

Tensor TrainedModel::read(const std::string &name) const {
  auto split = blocks.find(name);
  if (split == blocks.end())
    return Tensor::alias(ckpt.readTensor(name), types.at(name).shape);
  // Put the blocks together: each fills its rows of every outer index.
  const TensorType &type = types.at(name);
  Tensor whole(type);
  int axis = split->second.front().axis;
  int64_t outer = 1, inner = static_cast<int64_t>(dtypeSize(type.dtype));
  for (int d = 0; d < axis; ++d)
    outer *= type.shape[d];
  for (std::size_t d = axis + 1; d < type.shape.size(); ++d)
    inner *= type.shape[d];
  auto *out = static_cast<char *>(whole.rawData());
  for (const WeightBlock &b : split->second) {
    Tensor part = ckpt.readTensor(b.name);
    const auto *in = static_cast<const char *>(part.rawData());
    for (int64_t i = 0; i < outer; ++i)
      std::memcpy(out + (i * type.shape[axis] + b.start) * inner,
                  in + i * b.size * inner, b.size * inner);
  }
  return whole;
}

ExportSummary shoal::rt::writeSafetensors(
    const std::string &path, const TrainedModel &model,
    const std::map<std::string, std::string> &metadata) {
  std::vector<std::pair<std::string, std::string>> entries;
  for (const std::string &name : model.names())
    entries.emplace_back(name, name);
  return writeSafetensors(path, model, metadata, entries);
}

ExportSummary shoal::rt::writeSafetensors(
    const std::string &path, const TrainedModel &model,
    const std::map<std::string, std::string> &metadata,
    const std::vector<std::pair<std::string, std::string>> &tensors) {
  ExportSummary summary;
  summary.path = path;
  std::vector<std::string> entries;
  if (!metadata.empty()) {
    std::vector<std::string> items;
    for (const auto &[key, value] : metadata)
      items.push_back(jsonString(key) + ":" + jsonString(value));
    entries.push_back(
        fmt::format("\"__metadata__\":{{{}}}", fmt::join(items, ",")));
  }
  uint64_t offset = 0;
  for (const auto &[name, weight] : tensors) {
    TensorType type = model.typeOf(weight);
    uint64_t end = offset + type.numBytes();
    entries.push_back(fmt::format(
        "{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
        jsonString(name), safetensorsDTypeName(type.dtype),
        fmt::join(type.shape, ","), offset, end));
    offset = end;
  }
  std::string header = fmt::format("{{{}}}", fmt::join(entries, ","));
  header.append((8 - header.size() % 8) % 8, ' ');
  uint8_t length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<uint8_t>(uint64_t(header.size()) >> (8 * i));
  OutputFile out(path, "safetensors file");
  out.write(length, sizeof length);
  out.write(header.data(), header.size());
  for (const auto &entry : tensors) {
    Tensor value = model.read(entry.second);
    out.write(value.bytes(), value.numBytes());
    ++summary.tensors;
  }
  summary.bytes = offset;
  out.commit();
  return summary;
}

ExportSummary shoal::rt::writeTrainedOnnx(
    const std::string &path, const TrainedModel &model,
    const std::map<std::string, std::string> &metadata) {
  const std::string &sourcePath = model.source().path();
  ExportSummary summary;
  summary.path = path;
  std::error_code ec;
  if (fs::exists(path, ec) && fs::equivalent(path, sourcePath, ec))
    throw Error(fmt::format("--export-onnx {} is the plan's source model; "
                            "write the trained model to another file",
                            path));
  onnx::ModelProto proto;
  {
    MappedFile source(sourcePath, "source model");
    if (source.size() > static_cast<std::size_t>(INT_MAX) ||
        !proto.ParseFromArray(source.data(), static_cast<int>(source.size())))
      throw Error(fmt::format("cannot parse the plan's source model {} as a "
                              "binary ONNX model",
                              sourcePath));
  }
  std::string location = fs::path(path).filename().string() + ".data";
  summary.dataPath = (fs::path(path).parent_path() / location).string();
  OutputFile data(summary.dataPath, "external data file");
  for (onnx::TensorProto &t : *proto.mutable_graph()->mutable_initializer()) {
    Tensor value;
    if (model.contains(t.name()))
      value = model.read(t.name());
    else if (t.data_location() == onnx::TensorProto::EXTERNAL)
      // Not trained, but its data lies next to the source: carry it over.
      value = model.source().loadInitializer(t.name());
    else
      continue;
    setInitializerData(t, value, data, location, summary);
    ++summary.tensors;
  }
  for (const auto &[key, value] : metadata) {
    auto *props = proto.mutable_metadata_props();
    auto it = std::find_if(props->begin(), props->end(),
                           [&key = key](const onnx::StringStringEntryProto &p) {
                             return p.key() == key;
                           });
    onnx::StringStringEntryProto *entry =
        it != props->end() ? &*it : props->Add();
    entry->set_key(key);
    entry->set_value(value);
  }
  std::string bytes;
  if (!proto.SerializeToString(&bytes))
    throw Error(fmt::format("cannot write the model {}: its protobuf would "
                            "exceed 2 GiB",
                            path));
  if (summary.externalTensors > 0)
    data.commit();
  else
    summary.dataPath.clear();
  OutputFile out(path, "model");
  out.write(bytes.data(), bytes.size());
  out.commit();
  return summary;
}
