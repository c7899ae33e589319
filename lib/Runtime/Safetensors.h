//===- Safetensors.h - Reading safetensors checkpoints ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// shoal-run --init-from PATH (docs/HuggingFace.md): the weights of a model
// as Hugging Face's save_pretrained writes them, read block by block as
// OnnxWeightFile reads an ONNX model's. PATH is a .safetensors file, or a
// folder holding model.safetensors or a sharded set
// (model.safetensors.index.json, whose weight_map names the file of each
// tensor). Every file is mapped; a block is copied straight out of the
// mapping, so a rank reads only the pages of its own blocks.
//
// The format: an 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
// ..., "__metadata__": {..}}), then the tensors' raw little-endian bytes,
// the offsets counted from the end of the header.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_SAFETENSORS_H
#define SHOAL_RUNTIME_SAFETENSORS_H

#include "MappedFile.h"
#include "Tensor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shoal {
namespace rt {

/// One tensor of a safetensors file.
struct SafetensorsTensor {
  std::string name;
  /// The header's dtype ("F32", "BF16", "I16", ...), and its DType when shoal
  /// holds it (`known`).
  std::string dtypeName;
  DType dtype = DType::F32;
  bool known = false;
  Shape shape;
  /// Index of its file (SafetensorsWeights::filePath) and where its bytes
  /// lie in it (from the start of the file).
  std::size_t file = 0;
  uint64_t offset = 0, size = 0;
};

/// The DType of safetensors dtype `name`; false for those shoal does not hold.
bool safetensorsToDType(const std::string &name, DType &dtype);
/// The safetensors dtype name of `dtype` ("F32", "BF16", ...).
const char *safetensorsDTypeName(DType dtype);

/// A model's weights in the safetensors format: one file, or a folder as
/// save_pretrained writes it.
class SafetensorsWeights {
public:
  /// Maps and indexes `path`; throws Error naming the path (and the file of
  /// a sharded set) when it is missing, is not safetensors (a torch.save'd
  /// state dict included: scripts/torch_to_safetensors.py converts those),
  /// or its header is invalid.
  explicit SafetensorsWeights(const std::string &path);
  ~SafetensorsWeights();
  SafetensorsWeights(SafetensorsWeights &&) noexcept;

  /// As given.
  const std::string &path() const { return root; }
  bool isFolder() const { return folder; }
  std::size_t numTensors() const { return index.size(); }
  /// Every tensor's name, sorted.
  std::vector<std::string> names() const;
  /// The tensor called `name`, or null.
  const SafetensorsTensor *find(const std::string &name) const;
  /// The file that holds `t`.
  const std::string &filePath(const SafetensorsTensor &t) const;

  /// The block of shape `local` at `offsets` of tensor `name`, as a tensor of
  /// `global.dtype`. The tensor must have shape `sourceShape` (when given:
  /// the initializer's shape, which `global.shape` views with the same
  /// elements in the same order), else `global.shape`; F32, BF16 and F16
  /// tensors are converted to a weight of another of those types, others
  /// must have the weight's type. Throws Error naming the tensor, both
  /// shapes or types, and the file.
  Tensor loadBlock(const std::string &name, const TensorType &global,
                   const Shape &offsets, const Shape &local,
                   const Shape &sourceShape = {}) const;
  /// The whole tensor in its own type.
  Tensor loadTensor(const std::string &name) const;

private:
  void indexFile(const std::string &path);

  std::string root;
  bool folder = false;
  std::vector<std::unique_ptr<MappedFile>> files;
  std::map<std::string, SafetensorsTensor> index;
};

/// How the weights of a plan (ONNX initializer names) are named among the
/// tensors of a checkpoint: equal, or equal once a prefix is stripped from
/// the initializer names (an ONNX export of a module that wraps the Hugging
/// Face model names its parameters `hf.transformer.h.0...` where
/// save_pretrained writes `transformer.h.0...`).
struct WeightNameMatch {
  /// Stripped from the initializer names ("" when they are equal).
  std::string prefix;
  /// Initializer name -> tensor name.
  std::map<std::string, std::string> matched;
  /// Initializers without a tensor (sorted).
  std::vector<std::string> missing;
  /// Tensors that no initializer matches (sorted).
  std::vector<std::string> unused;
};

/// Matches `weights` to `tensors`. Without `givenPrefix`, tries every prefix
/// ending in '.' of a weight's name whose rest is a tensor name, and "",
/// and keeps the one under which the most weights match; throws Error (the
/// candidates and their counts, naming `what`) when two prefixes match
/// equally many. With `givenPrefix`, strips exactly that one.
WeightNameMatch matchWeightNames(const std::vector<std::string> &weights,
                                 const std::vector<std::string> &tensors,
                                 const std::string *givenPrefix,
                                 const std::string &what);

/// The name `weight` has under `match` (its prefix stripped when it has it).
std::string strippedName(const WeightNameMatch &match,
                         const std::string &weight);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_SAFETENSORS_H
