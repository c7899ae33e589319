//===- Export.h - Writing the trained model ---------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// shoal-run --export-onnx FILE and --export-safetensors DIR (docs/Training.md,
// "Exporting the trained model"). At the end of a training run every rank
// writes its distinct blocks of the model's weights as a checkpoint (the one
// of --save, or a scratch one) and rank 0 assembles each weight whole from
// it (Checkpoint::readTensor), in the shape of its initializer in the source
// model, and writes:
//
//   FILE        the source ONNX model (its own graph, inputs and outputs)
//               with every trained initializer's data replaced;
//   FILE.data   its external data: initializers of kExternalDataThreshold
//               bytes or more (ONNX's external data convention);
//   DIR/model.safetensors  the weights under their initializer names
//               (--export-hf: under Hugging Face's, docs/HuggingFace.md).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_EXPORT_H
#define SHOAL_RUNTIME_EXPORT_H

#include "Checkpoint.h"
#include "PlanLoader.h"
#include "WeightLoader.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shoal {
namespace rt {

/// Initializers of this many bytes or more go to the external data file
/// (onnx.save_model's default size_threshold).
constexpr uint64_t kExternalDataThreshold = 1024;
/// In the external data file, tensors of kAlignThreshold bytes or more start
/// at a multiple of kAlignment (ONNX's align_offset defaults: onnxruntime
/// maps such tensors instead of copying them, on any platform).
constexpr uint64_t kAlignThreshold = 1 << 20;
constexpr uint64_t kAlignment = 1 << 16;

/// The trained weights of a checkpoint, each whole and in the shape of its
/// initializer in the source model.
class TrainedModel {
public:
  /// `names`: the model's weights (TrainingInfo::modelWeights), every one an
  /// initializer of `sourcePath` and a tensor of `checkpoint`. Throws Error
  /// naming the path when the source no longer exists or is not an ONNX
  /// model, and naming the weight when one is missing from either or has
  /// another element type or count there.
  /// `blocks`: the initializers the plan reads in blocks
  /// (TrainingInfo::blocks), put together again from the blocks' tensors.
  TrainedModel(const Checkpoint &checkpoint, const std::string &sourcePath,
               std::vector<std::string> names,
               std::map<std::string, std::vector<WeightBlock>> blocks = {});

  const std::vector<std::string> &names() const { return weights; }
  bool contains(const std::string &name) const;
  /// The initializer's type in the source model.
  TensorType typeOf(const std::string &name) const;
  /// The weight's trained value, gathered from the checkpoint's shards and
  /// shaped as its initializer (a `source_shape` view has the same elements
  /// in the same order).
  Tensor read(const std::string &name) const;

  const OnnxWeightFile &source() const { return model; }
  const Checkpoint &checkpoint() const { return ckpt; }

private:
  const Checkpoint &ckpt;
  OnnxWeightFile model;
  std::vector<std::string> weights;
  std::map<std::string, TensorType> types;
  std::map<std::string, std::vector<WeightBlock>> blocks;
};

/// What an export wrote, for shoal-run's summary line.
struct ExportSummary {
  std::string path;
  std::size_t tensors = 0;
  uint64_t bytes = 0;
  /// --export-onnx: the external data file and how many tensors it holds
  /// (no file when none).
  std::string dataPath;
  std::size_t externalTensors = 0;
};

/// Writes every weight of `model` to `path` in the safetensors format
/// (8-byte little-endian header length, a JSON header padded with spaces to
/// a multiple of 8, then the tensors' raw little-endian bytes, in the order
/// of their names), with `metadata` as the header's "__metadata__". Writes a
/// temporary file next to it and renames it; throws Error naming the path.
ExportSummary
writeSafetensors(const std::string &path, const TrainedModel &model,
                 const std::map<std::string, std::string> &metadata);
/// The same with each weight `entries[i].second` of `model` written under
/// the name `entries[i].first`, in that order (--export-hf: Hugging Face's
/// names); a weight in no entry is not written.
ExportSummary writeSafetensors(
    const std::string &path, const TrainedModel &model,
    const std::map<std::string, std::string> &metadata,
    const std::vector<std::pair<std::string, std::string>> &entries);

/// Writes the source model of `model` to `path` with each of its weights'
/// initializers holding the trained value: inline below
/// kExternalDataThreshold bytes, else in `path` + ".data" (TensorProto
/// data_location EXTERNAL; location, offset and length). Initializers that
/// are not weights keep their data (moved into the new data file when the
/// source kept it outside). `metadata` is added to (or replaces entries of)
/// ModelProto.metadata_props. Throws Error naming the path.
ExportSummary
writeTrainedOnnx(const std::string &path, const TrainedModel &model,
                 const std::map<std::string, std::string> &metadata);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_EXPORT_H
