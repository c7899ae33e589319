//===- ShoalOps.td - shoal operations ----------------------*- tablegen -*-===//

#ifndef SHOAL_DIALECT_SHOAL_IR_SHOALOPS_TD
#define SHOAL_DIALECT_SHOAL_IR_SHOALOPS_TD

include "shoal/Dialect/Shoal/IR/ShoalDialect.td"
include "shoal/Dialect/Shoal/IR/ShoalAttributes.td"
include "shoal/Dialect/Shoal/IR/ShoalInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/IR/OpBase.td"

class Shoal_Op<string mnemonic, list<Trait> traits = []>
    : Op<Shoal_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Layer 1: graph ops (ONNX semantics)
//===----------------------------------------------------------------------===//

/// A graph op: pure, with a sharding rule and a cost.
class Shoal_GraphOp<string mnemonic, list<Trait> traits = []>
    : Shoal_Op<mnemonic, !listconcat(traits, [Pure,
        DeclareOpInterfaceMethods<Shoal_ShardingRuleOpInterface>,
        Shoal_CostOpInterface, Shoal_GradientOpInterface])> {
  let assemblyFormat =
      "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Shoal_WeightOp : Shoal_Op<"weight", [Pure]> {
  let summary = "Reference to a model weight (an ONNX initializer)";
  let description = [{
    Names an initializer of the source model and gives its type. The data is
    never read by the compiler; the plan tells each rank which slice of it to
    load.

    ```mlir
    %w = shoal.weight "h.0.mlp.fc.weight" : tensor<64x256xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Shoal_ConstantOp : Shoal_Op<"constant", [Pure, ConstantLike,
    TypesMatchWith<"result type matches value", "value", "result",
                   "$_self">]> {
  let summary = "A small constant tensor (ONNX Constant)";
  let description = [{
    ```mlir
    %c = shoal.constant dense<0.5> : tensor<f32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

class Shoal_BinaryOp<string mnemonic, string onnxName>
    : Shoal_GraphOp<mnemonic> {
  let summary = "Elementwise " # onnxName # " with numpy broadcasting";
  let description = [{
    ONNX `}] # onnxName # [{`. Shapes broadcast as in numpy.

    ```mlir
    %r = shoal.}] # mnemonic # [{ %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let extraClassDefinition = [{
    ::shoal::ShardingRule $cppClass::getShardingRule() {
      return ::shoal::getElementwiseShardingRule(getOperation());
    }
    ::mlir::LogicalResult $cppClass::verify() {
      return ::shoal::verifyElementwiseOp(getOperation());
    }
  }];
}

def Shoal_AddOp : Shoal_BinaryOp<"add", "Add">;
def Shoal_SubOp : Shoal_BinaryOp<"sub", "Sub">;
def Shoal_MulOp : Shoal_BinaryOp<"mul", "Mul">;
def Shoal_DivOp : Shoal_BinaryOp<"div", "Div">;
def Shoal_PowOp : Shoal_BinaryOp<"pow", "Pow">;
def Shoal_MaxOp : Shoal_BinaryOp<"max", "Max">;
def Shoal_MinOp : Shoal_BinaryOp<"min", "Min">;
def Shoal_EqualOp : Shoal_BinaryOp<"equal", "Equal">;
def Shoal_LessOp : Shoal_BinaryOp<"less", "Less">;
def Shoal_GreaterOp : Shoal_BinaryOp<"greater", "Greater">;
def Shoal_LessOrEqualOp : Shoal_BinaryOp<"less_or_equal", "LessOrEqual">;
def Shoal_GreaterOrEqualOp
    : Shoal_BinaryOp<"greater_or_equal", "GreaterOrEqual">;
def Shoal_AndOp : Shoal_BinaryOp<"and", "And">;
def Shoal_OrOp : Shoal_BinaryOp<"or", "Or">;
def Shoal_XorOp : Shoal_BinaryOp<"xor", "Xor">;

def Shoal_WhereOp : Shoal_GraphOp<"where"> {
  let summary = "Elementwise select with numpy broadcasting (ONNX Where)";
  let description = [{
    ```mlir
    %r = shoal.where %c, %x, %y : (tensor<4x4xi1>, tensor<f32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$condition, AnyRankedTensor:$x,
                   AnyRankedTensor:$y);
  let results = (outs AnyRankedTensor:$result);
  let extraClassDefinition = [{
    ::shoal::ShardingRule $cppClass::getShardingRule() {
      return ::shoal::getElementwiseShardingRule(getOperation());
    }
    ::mlir::LogicalResult $cppClass::verify() {
      return ::shoal::verifyElementwiseOp(getOperation());
    }
  }];
}

def Shoal_CastOp : Shoal_GraphOp<"cast"> {
  let summary = "Elementwise conversion to the result's element type";
  let description = [{
    ONNX `Cast`; the target type is the result's element type.

    ```mlir
    %r = shoal.cast %x : (tensor<4xi64>) -> tensor<4xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let extraClassDefinition = [{
    ::shoal::ShardingRule $cppClass::getShardingRule() {
      return ::shoal::getElementwiseShardingRule(getOperation());
    }
    ::mlir::LogicalResult $cppClass::verify() {
      return ::shoal::verifyElementwiseOp(getOperation());
    }
  }];
}

class Shoal_UnaryOp<string mnemonic, string onnxName>
    : Shoal_GraphOp<mnemonic> {
  let summary = "Elementwise " # onnxName;
  let description = [{
    ONNX `}] # onnxName # [{`.

    ```mlir
    %r = shoal.}] # mnemonic # [{ %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let extraClassDefinition = [{
    ::shoal::ShardingRule $cppClass::getShardingRule() {
      return ::shoal::getElementwiseShardingRule(getOperation());
    }
    ::mlir::LogicalResult $cppClass::verify() {
      return ::shoal::verifyElementwiseOp(getOperation());
    }
  }];
}

def Shoal_ErfOp : Shoal_UnaryOp<"erf", "Erf">;
def Shoal_TanhOp : Shoal_UnaryOp<"tanh", "Tanh">;
def Shoal_ReluOp : Shoal_UnaryOp<"relu", "Relu">;
def Shoal_SqrtOp : Shoal_UnaryOp<"sqrt", "Sqrt">;
def Shoal_ExpOp : Shoal_UnaryOp<"exp", "Exp">;
def Shoal_NegOp : Shoal_UnaryOp<"neg", "Neg">;
def Shoal_SigmoidOp : Shoal_UnaryOp<"sigmoid", "Sigmoid">;
def Shoal_SinOp : Shoal_UnaryOp<"sin", "Sin">;
def Shoal_CosOp : Shoal_UnaryOp<"cos", "Cos">;
def Shoal_AbsOp : Shoal_UnaryOp<"abs", "Abs">;
def Shoal_LogOp : Shoal_UnaryOp<"log", "Log">;
def Shoal_ReciprocalOp : Shoal_UnaryOp<"reciprocal", "Reciprocal">;
def Shoal_FloorOp : Shoal_UnaryOp<"floor", "Floor">;
def Shoal_CeilOp : Shoal_UnaryOp<"ceil", "Ceil">;
def Shoal_NotOp : Shoal_UnaryOp<"not", "Not">;

def Shoal_OnnxOp : Shoal_GraphOp<"onnx"> {
  let summary = "An ONNX op without a dedicated shoal op";
  let description = [{
    Carries an ONNX node (Conv, BatchNormalization, pools, Concat, Split,
    Slice, Expand, TopK, GatherElements, ScatterElements) with its
    attributes; compile-time inputs (Slice's starts/ends/axes/steps, Split's
    sizes, TopK's k) are folded into attributes of the same names. Its
    sharding rule comes from a table by op type: batch-major ops keep
    dimension 0 splittable, axis ops keep the other dimensions splittable,
    anything else stays whole.

    ```mlir
    %y = shoal.onnx "Conv"(%x, %w) {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x8x8xf32>
    ```
  }];
  let arguments = (ins StrAttr:$op_type, DictionaryAttr:$onnx_attrs,
                   Variadic<AnyRankedTensor>:$inputs);
  let results = (outs Variadic<AnyRankedTensor>:$outputs);
  let assemblyFormat = [{
    $op_type `(` $inputs `)` $onnx_attrs attr-dict `:` functional-type($inputs, results)
  }];
}

def Shoal_MatMulOp : Shoal_GraphOp<"matmul"> {
  let summary = "Matrix product with numpy semantics (ONNX MatMul)";
  let description = [{
    `[..., M, K] x [..., K, N] -> [..., M, N]`; batch dimensions broadcast.
    `K` is a reduction factor: splitting it gives partial sums.

    ```mlir
    %y = shoal.matmul %x, %w : (tensor<4x16x64xf32>, tensor<64x256xf32>) -> tensor<4x16x256xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let extraClassDeclaration = [{ int64_t getFlops(); }];
}

def Shoal_GemmOp : Shoal_GraphOp<"gemm"> {
  let summary = "General matrix multiply (ONNX Gemm)";
  let description = [{
    `alpha * op(A) * op(B) + beta * C` on 2-D operands; `C` broadcasts.

    ```mlir
    %y = shoal.gemm %a, %b, %c {transB = true} : (tensor<8x32xf32>, tensor<128x32xf32>, tensor<128xf32>) -> tensor<8x128xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$a, AnyRankedTensor:$b,
                   Optional<AnyRankedTensor>:$c,
                   DefaultValuedAttr<F32Attr, "1.0f">:$alpha,
                   DefaultValuedAttr<F32Attr, "1.0f">:$beta,
                   DefaultValuedAttr<BoolAttr, "false">:$transA,
                   DefaultValuedAttr<BoolAttr, "false">:$transB);
  let results = (outs AnyRankedTensor:$result);
  let extraClassDeclaration = [{ int64_t getFlops(); }];
}

def Shoal_SoftmaxOp : Shoal_GraphOp<"softmax"> {
  let summary = "Softmax along one axis (ONNX Softmax, opset 13)";
  let description = [{
    ```mlir
    %p = shoal.softmax %s {axis = -1 : i64} : (tensor<4x4x16x16xf32>) -> tensor<4x4x16x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input,
                   DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_LayerNormOp : Shoal_GraphOp<"layer_norm"> {
  let summary = "Layer normalization (ONNX LayerNormalization)";
  let description = [{
    Normalizes over the dimensions `axis..rank-1`, then scales and shifts.
    With `rms = true` it is RMSNorm (LLaMA's, T5's, `torch.nn.RMSNorm`):
    `x / sqrt(mean(x^2) + epsilon) * scale (+ bias)`, the mean not
    subtracted; shoal-fuse makes it from the chain exporters emit.

    ```mlir
    %y = shoal.layer_norm %x, %g, %b {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<4x16x64xf32>
    %r = shoal.layer_norm %x, %g {epsilon = 1.0e-06 : f32, rms = true} : (tensor<4x16x64xf32>, tensor<64xf32>) -> tensor<4x16x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$scale,
                   Optional<AnyRankedTensor>:$bias,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1e-5f">:$epsilon,
                   DefaultValuedAttr<BoolAttr, "false">:$rms);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_GatherOp : Shoal_GraphOp<"gather"> {
  let summary = "Gather along an axis (ONNX Gather)";
  let description = [{
    ```mlir
    %e = shoal.gather %table, %ids {axis = 0 : i64} : (tensor<96x64xf32>, tensor<4x16xi64>) -> tensor<4x16x64xf32>
    ```

    Vocabulary-parallel (after shoal-partition, axis 0 only): with
    `shard_axes` and `shard_size`, `data` is this rank's block of the rows of
    a table of `shard_size` rows split over the mesh axes `shard_axes`
    (ceil-sized blocks, as `local_slice` cuts them). An index is taken
    against the whole table; rows outside the block give zeros, so an
    `all_reduce` over `shard_axes` completes the lookup (Megatron-LM's
    VocabParallelEmbedding).

    ```mlir
    %p = shoal.gather %block, %ids {shard_axes = ["tp"], shard_size = 96 : i64} : (tensor<48x64xf32>, tensor<4x16xi64>) -> tensor<4x16x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$data, AnyRankedTensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$axis,
                   OptionalAttr<StrArrayAttr>:$shard_axes,
                   OptionalAttr<I64Attr>:$shard_size);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_ReshapeOp : Shoal_GraphOp<"reshape"> {
  let summary = "Reshape to a static shape (ONNX Reshape, shape folded)";
  let description = [{
    The importer folds ONNX's shape operand into the static result type.

    ```mlir
    %r = shoal.reshape %x : (tensor<4x16x64xf32>) -> tensor<4x16x4x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_TransposeOp : Shoal_GraphOp<"transpose"> {
  let summary = "Permute dimensions (ONNX Transpose)";
  let description = [{
    ```mlir
    %t = shoal.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<4x16x4x16xf32>) -> tensor<4x4x16x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs AnyRankedTensor:$result);
}

class Shoal_ReduceOp<string mnemonic, string onnxName>
    : Shoal_GraphOp<mnemonic> {
  let summary = onnxName # " over the given axes";
  let description = [{
    ONNX `}] # onnxName # [{` (axes as an attribute, as in opset 13-17).

    ```mlir
    %m = shoal.}] # mnemonic # [{ %x {axes = array<i64: -1>, keepdims = true} : (tensor<4x64xf32>) -> tensor<4x1xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, DenseI64ArrayAttr:$axes,
                   DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs AnyRankedTensor:$result);
  let extraClassDefinition = [{
    ::shoal::ShardingRule $cppClass::getShardingRule() {
      return ::shoal::getReduceShardingRule(getOperation(), getAxes(),
                                            getKeepdims());
    }
    ::mlir::LogicalResult $cppClass::verify() {
      return ::shoal::verifyReduceOp(getOperation(), getAxes(), getKeepdims());
    }
  }];
}

def Shoal_ReduceMeanOp : Shoal_ReduceOp<"reduce_mean", "ReduceMean">;
def Shoal_ReduceSumOp : Shoal_ReduceOp<"reduce_sum", "ReduceSum">;

//===----------------------------------------------------------------------===//
// Fused ops (made by shoal-fuse from the patterns exporters emit)
//===----------------------------------------------------------------------===//

def Shoal_GeluOp : Shoal_GraphOp<"gelu"> {
  let summary = "GELU, optionally after a bias add";
  let description = [{
    `y = z * 0.5 * (1 + erf(z / sqrt(2)))` with `z = x + bias` (numpy
    broadcasting) when `bias` is given; with `approximate = "tanh"` (ONNX
    Gelu's attribute) `y = 0.5 * z * (1 + tanh(sqrt(2/pi) * (z + 0.044715
    z^3)))`. shoal-fuse makes it from the chains PyTorch exports for
    `nn.GELU()`, `nn.GELU(approximate="tanh")` and Hugging Face's
    `NewGELUActivation` (`Add, Div, Erf, Add, Mul, Mul` for the first).

    ```mlir
    %y = shoal.gelu %x, %b : (tensor<4x256xf32>, tensor<256xf32>) -> tensor<4x256xf32>
    %t = shoal.gelu %x {approximate = "tanh"} : (tensor<4x256xf32>) -> tensor<4x256xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, Optional<AnyRankedTensor>:$bias,
                   DefaultValuedAttr<StrAttr, "\"none\"">:$approximate);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_GeluGradOp : Shoal_GraphOp<"gelu_grad"> {
  let summary = "Gradient of GELU with respect to its argument";
  let description = [{
    `dz = dy * gelu'(z)` with `z = x + bias` (numpy broadcasting, `bias`
    optional) and `gelu'` the derivative of the GELU form `approximate`
    names (as shoal.gelu's). shoal.gelu's gradient rule builds it: the
    gradients of `x` and `bias` are `dz` summed to their shapes.

    ```mlir
    %dz = shoal.gelu_grad %dy, %x, %b : (tensor<4x256xf32>, tensor<4x256xf32>, tensor<256xf32>) -> tensor<4x256xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input,
                   Optional<AnyRankedTensor>:$bias,
                   DefaultValuedAttr<StrAttr, "\"none\"">:$approximate);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_AddLayerNormOp : Shoal_GraphOp<"add_layer_norm"> {
  let summary = "Residual add followed by layer normalization";
  let description = [{
    `sum = lhs + rhs` (same shape) and `y = layer_norm(sum)` in one pass;
    both results are available (the sum is the next residual).

    ```mlir
    %s, %y = shoal.add_layer_norm %a, %b, %g, %beta {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x16x64xf32>, tensor<4x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<4x16x64xf32>, tensor<4x16x64xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs,
                   AnyRankedTensor:$scale, Optional<AnyRankedTensor>:$bias,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1e-5f">:$epsilon);
  let results = (outs AnyRankedTensor:$sum, AnyRankedTensor:$result);
}

def Shoal_AttentionOp : Shoal_GraphOp<"attention"> {
  let summary = "Scaled dot-product attention";
  let description = [{
    `softmax(q @ kt * scale + mask) @ v` over the last axis, with `q` of
    shape `[..., T, D]`, `kt` (keys already transposed) `[..., D, S]`, `v`
    `[..., S, E]` and an optional additive `mask` broadcastable to
    `[..., T, S]`. shoal-fuse makes it from `MatMul, Mul|Div, [Add], Softmax,
    MatMul`, so a backend can run it without materializing the scores.

    ```mlir
    %o = shoal.attention %q, %kt, %v, %m {scale = 2.500000e-01 : f32} : (tensor<4x4x16x16xf32>, tensor<4x4x16x16xf32>, tensor<4x4x16x16xf32>, tensor<16x16xf32>) -> tensor<4x4x16x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$q, AnyRankedTensor:$kt,
                   AnyRankedTensor:$v, Optional<AnyRankedTensor>:$mask,
                   F32Attr:$scale);
  let results = (outs AnyRankedTensor:$result);
  let extraClassDeclaration = [{ int64_t getFlops(); }];
}

//===----------------------------------------------------------------------===//
// Training: losses, gradient ops and optimizer updates (shoal-autodiff,
// shoal-optimizer; docs/Training.md)
//===----------------------------------------------------------------------===//

def Shoal_ExpandOp : Shoal_GraphOp<"expand"> {
  let summary = "Broadcast to the result's shape (ONNX Expand, shape folded)";
  let description = [{
    Numpy broadcasting of the input to the static result shape; the gradient
    of a sum over dimensions.

    ```mlir
    %e = shoal.expand %x : (tensor<4x1xf32>) -> tensor<4x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let extraClassDefinition = [{
    ::shoal::ShardingRule $cppClass::getShardingRule() {
      return ::shoal::getElementwiseShardingRule(getOperation());
    }
  }];
}

def Shoal_SoftmaxCrossEntropyOp : Shoal_GraphOp<"softmax_cross_entropy"> {
  let summary = "Per-position softmax cross-entropy of logits and labels";
  let description = [{
    `loss[i] = logsumexp(logits[i, :]) - logits[i, labels[i]]`, and 0 where
    `labels[i] == ignore_index`. The class axis is the last one and stays
    whole.

    ```mlir
    %l = shoal.softmax_cross_entropy %logits, %labels {ignore_index = -100 : i64} : (tensor<4x16x96xf32>, tensor<4x16xi64>) -> tensor<4x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$logits, AnyRankedTensor:$labels,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_SoftmaxCrossEntropyGradOp
    : Shoal_GraphOp<"softmax_cross_entropy_grad"> {
  let summary = "Gradient of softmax_cross_entropy with respect to the logits";
  let description = [{
    `dlogits[i, :] = (softmax(logits[i, :]) - onehot(labels[i])) * dloss[i]`,
    and 0 where `labels[i] == ignore_index`.

    ```mlir
    %g = shoal.softmax_cross_entropy_grad %logits, %labels, %dl {ignore_index = -100 : i64} : (tensor<4x16x96xf32>, tensor<4x16xi64>, tensor<4x16xf32>) -> tensor<4x16x96xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$logits, AnyRankedTensor:$labels,
                   AnyRankedTensor:$dloss,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs AnyRankedTensor:$result);
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy (made by shoal-partition)
//===----------------------------------------------------------------------===//

// The pieces of softmax_cross_entropy and its gradient when the class axis
// of the logits is split over `shard_axes` (Megatron-LM's
// vocab_parallel_cross_entropy): `logits` is this rank's block of the
// `shard_size` classes (ceil-sized blocks, the padding ignored), labels
// index the whole vocabulary. Between them, an all_reduce max over
// `shard_axes` of vocab_max and an all_reduce sum of vocab_stats.
class Shoal_VocabOp<string mnemonic> : Shoal_GraphOp<mnemonic> {
  let extraClassDefinition = [{
    ::shoal::ShardingRule $cppClass::getShardingRule() {
      return ::shoal::getVocabShardingRule(getOperation());
    }
  }];
}

def Shoal_VocabMaxOp : Shoal_VocabOp<"vocab_max"> {
  let summary = "The largest logit of each position in this rank's classes";
  let description = [{
    `max[i] = max_j logits[i, j]` over the classes of the block that exist
    (-inf when none does).

    ```mlir
    %m = shoal.vocab_max %logits {shard_axes = ["tp"], shard_size = 96 : i64} : (tensor<4x16x48xf32>) -> tensor<4x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$logits, StrArrayAttr:$shard_axes,
                   I64Attr:$shard_size);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_VocabStatsOp : Shoal_VocabOp<"vocab_stats"> {
  let summary = "Partial softmax denominators and the labels' logits";
  let description = [{
    With `max` the largest logit over all classes: `stats[i, 0] = sum_j
    exp(logits[i, j] - max[i])` over the block's classes, and `stats[i, 1]
    = logits[i, labels[i]]` if the block holds class `labels[i]`, else 0.
    Summed over `shard_axes`, they give the whole row's.

    ```mlir
    %s = shoal.vocab_stats %logits, %labels, %max {shard_axes = ["tp"], shard_size = 96 : i64} : (tensor<4x16x48xf32>, tensor<4x16xi64>, tensor<4x16xf32>) -> tensor<4x16x2xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$logits, AnyRankedTensor:$labels,
                   AnyRankedTensor:$max, StrArrayAttr:$shard_axes,
                   I64Attr:$shard_size,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_VocabCrossEntropyOp : Shoal_GraphOp<"vocab_cross_entropy"> {
  let summary = "Cross-entropy from the summed vocabulary statistics";
  let description = [{
    `loss[i] = log(stats[i, 0]) + max[i] - stats[i, 1]`, and 0 where
    `labels[i] == ignore_index`.

    ```mlir
    %l = shoal.vocab_cross_entropy %max, %stats, %labels : (tensor<4x16xf32>, tensor<4x16x2xf32>, tensor<4x16xi64>) -> tensor<4x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$max, AnyRankedTensor:$stats,
                   AnyRankedTensor:$labels,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_VocabCrossEntropyGradOp
    : Shoal_VocabOp<"vocab_cross_entropy_grad"> {
  let summary = "This rank's block of the cross-entropy's logit gradient";
  let description = [{
    `dlogits[i, j] = (exp(logits[i, j] - max[i]) / stats[i, 0] -
    [class j is labels[i]]) * dloss[i]` on the block's classes, 0 on its
    padding and where `labels[i] == ignore_index`.

    ```mlir
    %g = shoal.vocab_cross_entropy_grad %logits, %labels, %dl, %max, %stats {shard_axes = ["tp"], shard_size = 96 : i64} : (tensor<4x16x48xf32>, tensor<4x16xi64>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16x2xf32>) -> tensor<4x16x48xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$logits, AnyRankedTensor:$labels,
                   AnyRankedTensor:$dloss, AnyRankedTensor:$max,
                   AnyRankedTensor:$stats, StrArrayAttr:$shard_axes,
                   I64Attr:$shard_size,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_SoftmaxGradOp : Shoal_GraphOp<"softmax_grad"> {
  let summary = "Gradient of softmax from its output";
  let description = [{
    `dx = y * (dy - sum(dy * y, axis, keepdims))` with `y` the softmax's
    output.

    ```mlir
    %dx = shoal.softmax_grad %y, %dy {axis = -1 : i64} : (tensor<4x4x16x16xf32>, tensor<4x4x16x16xf32>) -> tensor<4x4x16x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$output, AnyRankedTensor:$grad,
                   DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_AttentionGradOp : Shoal_GraphOp<"attention_grad"> {
  let summary = "Gradients of scaled dot-product attention, recomputing it";
  let description = [{
    With `P = softmax(q @ kt * scale + mask)` and `dy` the gradient of
    `P @ v`: `dv = P^T @ dy`, `dS = P * (dP - sum(dP * P, -1))` with
    `dP = dy @ v^T`, `dq = scale * dS @ kt^T` and `dkt = scale * q^T @ dS`.
    The probabilities are recomputed from `q`, `kt` and `mask`, a block of
    query rows at a time, so neither pass keeps the `[..., T, S]` scores
    (flash attention's backward). shoal-autodiff makes it from
    shoal.attention, which shoal-fuse forms before it in a training
    compile; the mask gets no gradient (it is a constant or a graph input).

    ```mlir
    %dq, %dkt, %dv = shoal.attention_grad %dy, %q, %kt, %v, %m {scale = 2.500000e-01 : f32} : (tensor<4x4x16x16xf32>, tensor<4x4x16x16xf32>, tensor<4x4x16x16xf32>, tensor<4x4x16x16xf32>, tensor<16x16xf32>) -> (tensor<4x4x16x16xf32>, tensor<4x4x16x16xf32>, tensor<4x4x16x16xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$q,
                   AnyRankedTensor:$kt, AnyRankedTensor:$v,
                   Optional<AnyRankedTensor>:$mask, F32Attr:$scale);
  let results = (outs AnyRankedTensor:$dq, AnyRankedTensor:$dkt,
                 AnyRankedTensor:$dv);
  let extraClassDeclaration = [{ int64_t getFlops(); }];
}

def Shoal_LayerNormGradOp : Shoal_GraphOp<"layer_norm_grad"> {
  let summary = "Input gradient of a layer normalization";
  let description = [{
    With `xhat` the normalized input over `axis..rank-1` and `g = dy *
    scale`: `dx = (g - mean(g) - xhat * mean(g * xhat)) / sqrt(var + eps)`;
    with `rms = true` (RMSNorm) `dx = (g - xhat * mean(g * xhat)) /
    sqrt(mean(x^2) + eps)`.

    ```mlir
    %dx = shoal.layer_norm_grad %x, %scale, %dy {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x16x64xf32>, tensor<64xf32>, tensor<4x16x64xf32>) -> tensor<4x16x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$scale,
                   AnyRankedTensor:$grad,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1e-5f">:$epsilon,
                   DefaultValuedAttr<BoolAttr, "false">:$rms);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_LayerNormScaleGradOp : Shoal_GraphOp<"layer_norm_scale_grad"> {
  let summary = "Scale gradient of a layer normalization";
  let description = [{
    `dscale = sum over the leading dimensions of dy * xhat` (`xhat` as
    RMSNorm's with `rms = true`); the result has the normalized shape. The leading dimensions are summed, so splitting
    them (the batch) leaves partial sums.

    ```mlir
    %ds = shoal.layer_norm_scale_grad %x, %dy {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x16x64xf32>, tensor<4x16x64xf32>) -> tensor<64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$grad,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1e-5f">:$epsilon,
                   DefaultValuedAttr<BoolAttr, "false">:$rms);
  let results = (outs AnyRankedTensor:$result);
}

def Shoal_GatherGradOp : Shoal_GraphOp<"gather_grad"> {
  let summary = "Gradient of a gather along axis 0 (a scatter-add)";
  let description = [{
    Zeros of the result's shape (the gathered table), then
    `out[indices[i], ...] += grad[i, ...]`. The index dimensions are summed
    over, so splitting them (the batch) leaves partial sums. With
    `shard_axes` and `shard_size` (vocabulary-parallel, as for `gather`),
    the result is this rank's block of the rows, and indices outside it are
    skipped.

    ```mlir
    %dt = shoal.gather_grad %ids, %dy : (tensor<4x16xi64>, tensor<4x16x64xf32>) -> tensor<96x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$indices, AnyRankedTensor:$grad,
                   OptionalAttr<StrArrayAttr>:$shard_axes,
                   OptionalAttr<I64Attr>:$shard_size);
  let results = (outs AnyRankedTensor:$result);
}

class Shoal_OptimizerOp<string mnemonic> : Shoal_Op<mnemonic, [
    DeclareOpInterfaceMethods<Shoal_ShardingRuleOpInterface>,
    Shoal_CostOpInterface, MemoryEffects<[MemWrite]>]> {
  let assemblyFormat = "operands attr-dict `:` type(operands)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::shoal::ShardingRule $cppClass::getShardingRule() {
      return ::shoal::getOptimizerShardingRule(getOperation());
    }
    ::mlir::LogicalResult $cppClass::verify() {
      return ::shoal::verifyOptimizerOp(getOperation());
    }
  }];
}

def Shoal_AdamWOp : Shoal_OptimizerOp<"adamw"> {
  let summary = "AdamW update of a weight and its moments, in place";
  let description = [{
    Made by `shoal-optimizer`. Updates the weight `w` and its moments `m`
    and `v` (zero-initialized weights) from the gradient `g`, as PyTorch's
    `torch.optim.AdamW`, at the runtime's step count; the learning rate
    follows the warmup and `lr_schedule` (cosine, linear or constant);
    `clip_norm > 0` scales every
    gradient of the step by the global-norm factor first (docs/Training.md).

    ```mlir
    shoal.adamw %w, %g, %m, %v {lr = 1.0e-03 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, weight_decay = 0.01 : f64, clip_norm = 0.0 : f64, warmup_steps = 0 : i64, total_steps = 0 : i64, min_lr = 0.0 : f64} : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$weight, AnyRankedTensor:$grad,
                   AnyRankedTensor:$exp_avg, AnyRankedTensor:$exp_avg_sq,
                   F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                   F64Attr:$weight_decay, F64Attr:$clip_norm,
                   I64Attr:$warmup_steps, I64Attr:$total_steps,
                   F64Attr:$min_lr,
                   DefaultValuedStrAttr<StrAttr, "cosine">:$lr_schedule);
}

def Shoal_SGDOp : Shoal_OptimizerOp<"sgd"> {
  let summary = "SGD (with momentum) update of a weight, in place";
  let description = [{
    As PyTorch's `torch.optim.SGD` (no dampening, no Nesterov); `buf` is the
    momentum buffer (a zero-initialized weight).

    ```mlir
    shoal.sgd %w, %g, %buf {lr = 0.1 : f64, momentum = 0.9 : f64, weight_decay = 0.0 : f64, clip_norm = 0.0 : f64, warmup_steps = 0 : i64, total_steps = 0 : i64, min_lr = 0.0 : f64} : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$weight, AnyRankedTensor:$grad,
                   AnyRankedTensor:$momentum_buffer, F64Attr:$lr,
                   F64Attr:$momentum, F64Attr:$weight_decay, F64Attr:$clip_norm,
                   I64Attr:$warmup_steps, I64Attr:$total_steps,
                   F64Attr:$min_lr,
                   DefaultValuedStrAttr<StrAttr, "cosine">:$lr_schedule);
}

def Shoal_AssignOp : Shoal_OptimizerOp<"assign"> {
  let summary = "Writes a value into a weight, in place";
  let description = [{
    The importer writes one for each running statistic of a train-mode
    BatchNormalization (`running_mean`, `running_var`): the weight takes
    the statistic's new value. `shoal-optimizer` puts it in the optimizer
    phase, so that it runs once per step, after the backward, like the
    weight updates.

    ```mlir
    shoal.assign %running_mean, %new_mean : tensor<8xf32>, tensor<8xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$weight, AnyRankedTensor:$value);
}

//===----------------------------------------------------------------------===//
// Layer 2: parallel structure
//===----------------------------------------------------------------------===//

def Shoal_TaskGraphOp : Shoal_Op<"task_graph", [IsolatedFromAbove,
    SingleBlock]> {
  let summary = "A TaskGraph: one user scope with its strategy";
  let description = [{
    Made by `shoal-form-taskgraphs` from a `replicate(n)` or `split(n)` scope.
    The body is isolated: it sees only its block arguments (the TaskGraph's
    inputs) and yields its outputs. `mesh` is the device mesh it runs on:
    `dp` (data-parallel replicas) x `tp` (the scope's devices).

    ```mlir
    %y = shoal.task_graph "blocks" split(2) mesh #shoal.mesh<["dp", "tp"], [2, 2]> (%x : tensor<4x16x64xf32>) -> tensor<4x16x64xf32> {
    ^bb0(%a: tensor<4x16x64xf32>):
      ...
      shoal.yield %r : tensor<4x16x64xf32>
    }
    ```
  }];
  let arguments = (ins StrAttr:$sym_name, Shoal_Strategy:$strategy,
                   I64Attr:$devices, OptionalAttr<Shoal_MeshAttr>:$mesh,
                   Variadic<AnyRankedTensor>:$inputs);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name $strategy `(` $devices `)` (`mesh` $mesh^)?
    (`(` $inputs^ `:` type($inputs) `)`)? (`->` type($results)^)?
    attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    YieldOp getYield();
  }];
}

def Shoal_YieldOp : Shoal_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"TaskGraphOp">]> {
  let summary = "Returns a TaskGraph's outputs";
  let description = [{
    ```mlir
    shoal.yield %a, %b : tensor<4xf32>, tensor<4xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$operands);
  let assemblyFormat = "($operands^ `:` type($operands))? attr-dict";
}

//===----------------------------------------------------------------------===//
// Layer 3: SPMD collectives
//===----------------------------------------------------------------------===//

class Shoal_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Shoal_Op<mnemonic, !listconcat(traits, [Pure])> {
  let results = (outs AnyRankedTensor:$result);
  let hasVerifier = 1;
}

def Shoal_AllReduceOp : Shoal_CollectiveOp<"all_reduce",
    [AllTypesMatch<["input", "result"]>]> {
  let summary = "Sum (or max) over the ranks that differ only on `axes`";
  let description = [{
    `reduction` is "sum" (the default) or "max" (the largest logit of a
    vocabulary-parallel cross-entropy).

    ```mlir
    %s = shoal.all_reduce %p over ["tp"] : tensor<4x16x64xf32>
    %m = shoal.all_reduce %l over ["tp"] {reduction = "max"} : tensor<4x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, StrArrayAttr:$axes,
                   DefaultValuedAttr<StrAttr, "\"sum\"">:$reduction);
  let assemblyFormat = "$input `over` $axes attr-dict `:` type($result)";
}

def Shoal_AllGatherOp : Shoal_CollectiveOp<"all_gather"> {
  let summary = "Concatenate along `dim` the blocks of the ranks on `axes`";
  let description = [{
    ```mlir
    %g = shoal.all_gather %x dim 2 over ["tp"] : (tensor<4x16x48xf32>) -> tensor<4x16x96xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$dim,
                   StrArrayAttr:$axes);
  let assemblyFormat = [{
    $input `dim` $dim `over` $axes attr-dict `:` functional-type(operands, results)
  }];
}

def Shoal_ReduceScatterOp : Shoal_CollectiveOp<"reduce_scatter"> {
  let summary = "Sum over the ranks on `axes`, each keeping its block of `dim`";
  let description = [{
    The sum of `all_reduce`, of which each rank of a group keeps only its
    block along `dim` (ceil-sized blocks, the last ones zero-padded, as
    `local_slice` cuts them). Over `mb` as well, the input is first summed
    over the step's micro-batches and the scatter runs at the last one.
    `shoal-zero` makes them from the gradient all-reduces of ZeRO.

    ```mlir
    %g = shoal.reduce_scatter %p dim 0 over ["dp"] : (tensor<64x32xf32>) -> tensor<32x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$dim,
                   StrArrayAttr:$axes);
  let assemblyFormat = [{
    $input `dim` $dim `over` $axes attr-dict `:` functional-type(operands, results)
  }];
}

def Shoal_LocalSliceOp : Shoal_CollectiveOp<"local_slice"> {
  let summary = "Keep this rank's block along `dim` (no communication)";
  let description = [{
    The inverse of `all_gather`: turns a value that is whole on every rank of
    `axes` into one split over them.

    ```mlir
    %s = shoal.local_slice %x dim 0 over ["tp"] : (tensor<4x16xf32>) -> tensor<2x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$dim,
                   StrArrayAttr:$axes);
  let assemblyFormat = [{
    $input `dim` $dim `over` $axes attr-dict `:` functional-type(operands, results)
  }];
}

def Shoal_AllToAllOp : Shoal_CollectiveOp<"all_to_all"> {
  let summary = "Trade a split of one dimension for a split of another";
  let description = [{
    Among the ranks of `axes` (in group order), every rank cuts dimension
    `split_dim` of its block into one piece per rank, sends piece j to rank
    j, and concatenates what it receives along `concat_dim` in group order.
    A value split over `axes` on `concat_dim` comes out split over them on
    `split_dim`: the dispatch and combine of expert parallelism.

    ```mlir
    %e = shoal.all_to_all %x split 0 concat 1 over ["tp"] : (tensor<4x8x32xf32>) -> tensor<2x16x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$split_dim,
                   I64Attr:$concat_dim, StrArrayAttr:$axes);
  let assemblyFormat = [{
    $input `split` $split_dim `concat` $concat_dim `over` $axes attr-dict `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Bridges between TaskGraphs on different device sets
//===----------------------------------------------------------------------===//

def Shoal_BridgeOp : Shoal_Op<"bridge"> {
  let summary = "Moves a value between TaskGraphs on different device sets";
  let description = [{
    Made by `shoal-insert-bridges` between TaskGraphs whose meshes or ranks
    differ (pipeline stages). Every rank of `to` gets its block of the value
    from the ranks of `from` that hold it; `shoal-pipeline` turns the bridge
    into a `shoal.send` in the producer and a `shoal.recv` in the consumer.
    Before `shoal-partition` both types are global; after, each is the
    local type of its side.

    ```mlir
    %b = shoal.bridge %a from #shoal.layout<...> to #shoal.layout<...> : (tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, Shoal_LayoutAttr:$from,
                   Shoal_LayoutAttr:$to);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `from` $from `to` $to attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Shoal_SendOp : Shoal_Op<"send"> {
  let summary = "Sends this rank's blocks of a value to another device set";
  let description = [{
    The producer's half of a bridge; `id` pairs it with its `shoal.recv`.
    Non-blocking: the runtime completes sends at the end of a step.

    ```mlir
    shoal.send %a id 0 from #shoal.layout<...> to #shoal.layout<...> : tensor<4x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$id,
                   Shoal_LayoutAttr:$from, Shoal_LayoutAttr:$to);
  let assemblyFormat = [{
    $input `id` $id `from` $from `to` $to attr-dict `:` type($input)
  }];
  let hasVerifier = 1;
}

def Shoal_RecvOp : Shoal_Op<"recv"> {
  let summary = "Receives this rank's block of a value from another device set";
  let description = [{
    ```mlir
    %a = shoal.recv id 0 from #shoal.layout<...> to #shoal.layout<...> : tensor<2x64xf32>
    ```
  }];
  let arguments = (ins I64Attr:$id, Shoal_LayoutAttr:$from,
                   Shoal_LayoutAttr:$to);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    `id` $id `from` $from `to` $to attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

#endif // SHOAL_DIALECT_SHOAL_IR_SHOALOPS_TD
