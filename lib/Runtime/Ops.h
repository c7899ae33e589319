//===- Ops.h - Op kinds, attributes and type rules --------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The ops a plan may contain (proto/plan.proto, message Op): their arity,
// their attributes with ONNX names and defaults, and the rule that gives
// their output types from their input types. Plan validation runs these rules
// on every op before anything executes, so kernels only ever see consistent
// types.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_OPS_H
#define SHOAL_RUNTIME_OPS_H

#include "Sharding.h"
#include "Tensor.h"
#include "cpu/Kernels.h"
#include "cpu/Optimizers.h"

#include <string>
#include <vector>

namespace shoal {
namespace plan {
class Op;
} // namespace plan

namespace rt {

enum class OpKind {
  MatMul,
  Gemm,
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Erf,
  Tanh,
  Relu,
  Sqrt,
  Exp,
  Neg,
  Sigmoid,
  Softmax,
  LayerNormalization,
  Gather,
  Reshape,
  Transpose,
  ReduceMean,
  ReduceSum,
  AllReduce,
  AllGather,
  AllToAll,
  LocalSlice,
  // Fused ops made by shoal-fuse.
  Gelu,
  AddLayerNorm,
  Attention,
  // More ONNX ops.
  Cast,
  Where,
  Equal,
  Less,
  Greater,
  LessOrEqual,
  GreaterOrEqual,
  And,
  Or,
  Xor,
  Not,
  Sin,
  Cos,
  Abs,
  Log,
  Reciprocal,
  Floor,
  Ceil,
  Max,
  Min,
  Concat,
  Split,
  Slice,
  Expand,
  Pad,
  Conv,
  BatchNormalization,
  MaxPool,
  AveragePool,
  GlobalAveragePool,
  GlobalMaxPool,
  GatherElements,
  ScatterElements,
  TopK,
  Trilu,
  // Training ops (docs/Training.md).
  SoftmaxCrossEntropy,
  SoftmaxCrossEntropyGrad,
  SoftmaxGrad,
  LayerNormalizationGrad,
  LayerNormalizationScaleGrad,
  GatherGrad,
  /// Optimizer updates: no outputs; they update their inputs in place and
  /// run through the executor's optimizer step (cpu/Optimizers.h).
  AdamW,
  SGD,
  // Point-to-point transfers between programs or tasks (Op.transfer).
  Send,
  Recv,
};

/// The kind called `name` (ONNX op type or shoal collective); false if
/// unknown.
bool parseOpKind(const std::string &name, OpKind &kind);
/// The names of every kind, for messages.
std::string knownOpKinds();

/// An op's attributes after validation, ONNX defaults filled in and axes
/// normalized to be non-negative.
struct OpAttrs {
  /// Softmax, LayerNormalization, Gather; SoftmaxGrad,
  /// LayerNormalization(Scale)Grad and GatherGrad (always 0).
  int64_t axis = 0;
  float epsilon = 1e-5f;         ///< LayerNormalization and its gradients.
  float alpha = 1.f, beta = 1.f; ///< Gemm.
  float scale = 1.f;             ///< Attention.
  bool transA = false, transB = false;
  std::vector<int64_t> perm;     ///< Transpose.
  std::vector<int64_t> axes;     ///< Reduce*: sorted, unique.
  bool keepdims = true;          ///< Reduce*.
  bool reduceIsIdentity = false; ///< Reduce* with no axes and noop set.
  Shape shape;                   ///< Reshape (the attribute as written).
  int64_t dim = 0;               ///< AllGather, LocalSlice; AllToAll: split.
  int64_t concatDim = 0;         ///< AllToAll.
  std::vector<int> meshAxes;     ///< Collectives: mesh axis indices.
  int64_t groupSize = 1;         ///< Collectives: ranks per group.
  // Also: axis for Concat, Split, GatherElements, ScatterElements and TopK;
  // epsilon for BatchNormalization; shape for Expand (the attribute, empty
  // when absent).
  DType to = DType::F32;      ///< Cast.
  std::vector<int64_t> split; ///< Split: every output's size.
  /// Slice: first index and step of every dimension (resolved).
  std::vector<int64_t> starts, steps;
  cpu::WindowParams window;           ///< Conv, MaxPool, AveragePool.
  int64_t group = 1;                  ///< Conv.
  bool countIncludePad = false;       ///< AveragePool.
  int64_t k = 0;                      ///< TopK.
  bool largest = true, sorted = true; ///< TopK.
  bool upper = true;                  ///< Trilu (its diagonal offset is k).
  cpu::ScatterReduction reduction = cpu::ScatterReduction::None;
  /// Pad: begins of every dimension, then ends.
  std::vector<int64_t> pads;
  cpu::PadMode padMode = cpu::PadMode::Constant; ///< Pad.
  double padValue = 0;                           ///< Pad: constant_value.
  int64_t ignoreIndex = -100;                    ///< SoftmaxCrossEntropy(Grad).
  cpu::OptimizerParams optimizer;                ///< AdamW and SGD.
};

/// One validated op of the program.
struct OpInfo {
  OpKind kind = OpKind::MatMul;
  int index = 0;
  std::string kindName;
  std::string name; ///< ONNX node name, may be empty.
  /// Value ids; -1 marks an absent optional operand.
  std::vector<int> inputs, outputs;
  OpAttrs attrs;
  /// The task (index into LoadedPlan::tasks) the op belongs to.
  int task = 0;
  /// Send and Recv: index into LoadedPlan::transfers; -1 otherwise.
  int transfer = -1;
  /// FLOPs and bytes the compiler estimated for the op (Op.flops, Op.bytes;
  /// 0 when unknown), for profiles.
  double flops = 0, bytes = 0;

  /// `op #3 '/h.0/attn/MatMul' (MatMul)`, for messages.
  std::string describe() const;
  bool isCollective() const {
    return kind == OpKind::AllReduce || kind == OpKind::AllGather ||
           kind == OpKind::AllToAll || kind == OpKind::LocalSlice;
  }
};

/// Checks `op` (number `index` in its program) against the local `types` of
/// the program's values: known kind, arity, value ids in range, attributes,
/// and declared output types equal to what the inputs give. Returns the
/// parsed op; throws Error saying what is wrong (without the op prefix).
/// Send and Recv are only checked for arity and for having a transfer: their
/// types depend on the rank, which the plan loader knows.
OpInfo checkOp(const plan::Op &op, int index,
               const std::vector<TensorType> &types, const Mesh &mesh);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_OPS_H
