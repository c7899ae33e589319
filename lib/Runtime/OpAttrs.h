//===- OpAttrs.h - Validated attributes of plan ops -------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// An op's attributes after its type rule (ops/TypeRules.h) has read and
// checked them: ONNX defaults filled in, axes normalized to be non-negative.
// Part of the op model, which no backend owns: kernels of every backend
// take their parameters from here.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_OPATTRS_H
#define SHOAL_RUNTIME_OPATTRS_H

#include "Tensor.h"

#include <cstdint>
#include <vector>

namespace shoal {
namespace rt {

/// A sliding window over the spatial dimensions (Conv and the pools).
/// Every vector has one entry per spatial dimension, except `pads`: the
/// begins of every spatial dimension, then the ends.
struct WindowParams {
  std::vector<int64_t> kernel, strides, pads, dilations;
  bool ceilMode = false;
};

/// How ScatterElements combines an update with the element it lands on.
enum class ScatterReduction { None, Add, Mul, Max, Min };

/// Pad's modes.
enum class PadMode { Constant, Reflect, Edge };

/// Resize and ResizeGrad: how an output coordinate maps to the input's
/// (ONNX's coordinate_transformation_mode) and, for nearest, which input
/// element it takes.
struct ResizeParams {
  enum class Transform {
    HalfPixel,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNN
  };
  enum class Nearest { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };
  bool linear = false; ///< mode linear (n-linear), else nearest.
  Transform transform = Transform::HalfPixel;
  Nearest nearest = Nearest::RoundPreferFloor;
  /// One per dimension; empty: each is the output size over the input's.
  std::vector<double> scales;
};

/// The attributes of an AdamW or SGD op. Absent attributes take these
/// defaults (PyTorch's where it has one); `lr` is required.
struct OptimizerParams {
  enum Kind { AdamW, SGD };
  Kind kind = AdamW;
  double lr = 1e-3;          ///< Peak learning rate (`lr`).
  double beta1 = 0.9;        ///< AdamW (`beta1`).
  double beta2 = 0.999;      ///< AdamW (`beta2`).
  double eps = 1e-8;         ///< AdamW (`eps`).
  double momentum = 0;       ///< SGD (`momentum`).
  double weightDecay = 0.01; ///< `weight_decay`; SGD's default is 0.
  /// Global gradient-norm clipping threshold (`clip_norm`); 0 is off.
  double clipNorm = 0;
  double minLr = 0;        ///< End of the decay (`min_lr`).
  int64_t warmupSteps = 0; ///< Linear warmup steps (`warmup_steps`).
  int64_t totalSteps = 0;  ///< The decay ends here; 0: none.
  /// After the warmup (`lr_schedule`): cosine or linear decay from lr to
  /// min_lr at total_steps, or lr throughout.
  enum Schedule { Cosine, Linear, Constant };
  Schedule schedule = Cosine;
  /// A pipeline stage's copy of a weight that an earlier stage also
  /// updates (`mirror`, tied embeddings): its gradient is counted once,
  /// there, in the clipping norm.
  bool mirror = false;
};

/// An op's attributes after validation, ONNX defaults filled in and axes
/// normalized to be non-negative.
struct OpAttrs {
  /// Softmax, LayerNormalization, Gather; SoftmaxGrad,
  /// LayerNormalization(Scale)Grad and GatherGrad (always 0).
  int64_t axis = 0;
  float epsilon = 1e-5f; ///< LayerNormalization and its gradients.
  /// LayerNormalization and its gradients: `rms` = 1, RMSNorm (no mean).
  bool rms = false;
  float alpha = 1.f, beta = 1.f; ///< Gemm; HardSigmoid, HardSwish.
  float scale = 1.f;             ///< Attention.
  bool tanhGelu = false;         ///< Gelu, GeluGrad: approximate = "tanh".
  /// Send, Recv: only at the step's last micro-batch (`last_micro_batch`);
  /// before it, a Recv's value is zeros.
  bool lastMicroBatchOnly = false;
  bool transA = false, transB = false;
  std::vector<int64_t> perm;     ///< Transpose.
  std::vector<int64_t> axes;     ///< Reduce*: sorted, unique.
  bool keepdims = true;          ///< Reduce*, ArgMax, ArgMin.
  bool selectLastIndex = false;  ///< ArgMax, ArgMin: ties give the last.
  /// CumSum: each element left out of its own sum; summed from the end.
  bool exclusive = false, reverse = false;
  bool fmod = false;             ///< Mod: C's fmod (else Python's %).
  bool reduceIsIdentity = false; ///< Reduce* with no axes and noop set.
  Shape shape;                   ///< Reshape (the attribute as written).
  int64_t dim = 0;               ///< AllGather, LocalSlice; AllToAll: split.
  int64_t concatDim = 0;         ///< AllToAll.
  /// Collectives: mesh axis indices; vocabulary-parallel ops (Gather,
  /// GatherGrad, Vocab*): those of `shard_axes`.
  std::vector<int> meshAxes;
  int64_t groupSize = 1; ///< Ranks per group over meshAxes.
  /// AllGather of a value with uneven blocks (Program.value_layouts): each
  /// group member's block along `dim`, in group order; empty: even. Set by
  /// the plan loader, never read from a plan.
  std::vector<int64_t> gatherBlocks;
  bool reduceMax = false; ///< AllReduce `reduction = "max"`.
  /// Vocabulary-parallel ops: rows (classes) of the whole table (logits);
  /// 0: not vocabulary-parallel.
  int64_t shardSize = 0;
  /// AdamW, SGD under ZeRO 1/2 (`zero_axes`): the mesh axes whose ranks
  /// each update one block of the weight's dimension 0, and their count
  /// (empty, 1: the plain update).
  std::vector<int> zeroAxes;
  int64_t zeroGroupSize = 1;
  // Also: axis for Concat, Split, GatherElements, ScatterElements, OneHot
  // and TopK; reduction for ScatterElements and ScatterND;
  // epsilon for BatchNormalization; shape for Expand (the attribute, empty
  // when absent).
  DType to = DType::F32;      ///< Cast.
  std::vector<int64_t> split; ///< Split: every output's size.
  /// Slice: first index and step of every dimension (resolved).
  std::vector<int64_t> starts, steps;
  WindowParams window;                ///< Conv, MaxPool, AveragePool.
  int64_t group = 1;                  ///< Conv.
  bool countIncludePad = false;       ///< AveragePool.
  int64_t k = 0;                      ///< TopK.
  bool largest = true, sorted = true; ///< TopK.
  bool upper = true;                  ///< Trilu (its diagonal offset is k).
  std::vector<int64_t> repeats;       ///< Tile.
  ResizeParams resize;                ///< Resize, ResizeGrad.
  int64_t depth = 0;                  ///< OneHot (its axis is axis).
  ScatterReduction reduction = ScatterReduction::None;
  /// Pad: begins of every dimension, then ends.
  std::vector<int64_t> pads;
  PadMode padMode = PadMode::Constant; ///< Pad.
  double padValue = 0;                 ///< Pad: constant_value.
  int64_t ignoreIndex = -100;          ///< SoftmaxCrossEntropy(Grad).
  OptimizerParams optimizer;           ///< AdamW and SGD.
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_OPATTRS_H
