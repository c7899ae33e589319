// shoal-mixed-precision's default mode (docs/Training.md "Mixed precision"):
// the model in bf16, as Megatron-LM trains. Activations, forward and
// backward, are bf16; each weight is read through one cast; weight
// gradients come out of their products and reductions in f32 and are summed
// over micro-batches and replicas in f32; the loss and the optimizer stay
// f32. No cast stands between two bf16 ops.
// RUN: shoal-opt %inputs/two_layer_attention.mlir --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-mixed-precision="precision=bf16" | FileCheck %s --check-prefix=MODEL --implicit-check-not='shoal.cast {{.*}}xbf16>) -> tensor<{{[0-9x]+}}xf32>'
// On TaskGraphs with micro-batches and data parallelism.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_mb2.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-mixed-precision="precision=fp16" --shoal-pipeline | FileCheck %s --check-prefix=TG --implicit-check-not='shoal.cast {{.*}}xf16>) -> tensor<{{[0-9x]+}}xf32>'
// The training config's precision names (bf16-autocast: only the products).
// An embedding's rows (a gather from a float32 table) are activations:
// their tp sum moves bf16; the model's own float32 cast, now bf16 to
// bf16, is gone; a constant beyond bf16's range saturates.
// RUN: shoal-opt %s --shoal-mixed-precision="precision=bf16" | FileCheck %s --check-prefix=EMB --implicit-check-not=shoal.cast
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-parallelize="train=%S/Inputs/train_bad_precision.yaml" 2>&1 | FileCheck %s --check-prefix=BADNAME

// MODEL: module attributes {shoal.training = {{{.*}}precision = "bf16", precision_mode = "model"}}
// The weight is read through one cast, the product runs in bf16.
// MODEL: %[[W0:.*]] = shoal.weight "h.0.q" : tensor<8x8xf32>
// MODEL-NEXT: %[[W0L:.*]] = shoal.cast %[[W0]] {shoal.precision_cast{{.*}}} : (tensor<8x8xf32>) -> tensor<8x8xbf16>
// A graph input's low copy is made right before its first reader (the
// labels' not at the top of the step, where it would be held through the
// forward).
// MODEL-NEXT: %[[X:.*]] = shoal.cast %arg0 {shoal.precision_cast{{.*}}} : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
// MODEL-NEXT: %[[Q:.*]] = shoal.matmul %[[X]], %[[W0L]] : (tensor<2x4x8xbf16>, tensor<8x8xbf16>) -> tensor<2x4x8xbf16>
// The scores, their scale (a bf16 constant) and the softmax are bf16.
// MODEL: shoal.mul %{{.*}}, %{{.*}} : (tensor<2x4x4xbf16>, tensor<bf16>) -> tensor<2x4x4xbf16>
// MODEL-NEXT: shoal.softmax %{{.*}} : (tensor<2x4x4xbf16>) -> tensor<2x4x4xbf16>
// The loss sums bf16 squares into an f32 scalar.
// MODEL: %[[Y:.*]] = shoal.cast %arg1 {shoal.precision_cast{{.*}}} : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
// MODEL-NEXT: shoal.sub %{{.*}}, %[[Y]]
// MODEL: shoal.reduce_sum %{{.*}} : (tensor<2x4x8xbf16>) -> tensor<f32>
// Backward: activation gradients bf16, the softmax's too; a weight's
// gradient is a bf16 product with an f32 result, what AdamW reads.
// MODEL: %[[GW:.*]] = shoal.gemm %{{.*}}, %{{.*}} {shoal.phase = "backward", transA = true} : (tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8x8xf32>
// MODEL: shoal.softmax_grad %{{.*}}, %{{.*}} {shoal.phase = "backward"} : (tensor<2x4x4xbf16>, tensor<2x4x4xbf16>) -> tensor<2x4x4xbf16>
// MODEL: shoal.adamw %{{.*}}, %[[GW]], %{{.*}}, %{{.*}} {{.*}} : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>

// TG: shoal.task_graph "model" {{.*}}-> tensor<2x128xf16>, tensor<2x128xf16>, tensor<2x32xf16>, tensor<2x32xf16>, tensor<2x24xf16>, tensor<f32>
// TG: shoal.weight "fc1.weight" {{.*}}: tensor<128x32xf32>
// TG-NEXT: shoal.cast %{{.*}} : (tensor<128x32xf32>) -> tensor<128x32xf16>
// TG: shoal.gemm {{.*}} : (tensor<2x32xf16>, tensor<128x32xf16>, tensor<128xf16>) -> tensor<2x128xf16>
// The loss: an f32 sum over micro-batches and replicas.
// TG: shoal.all_reduce %{{.*}} over ["mb", "dp"] : tensor<f32>
// TG: shoal.task_graph "model.bwd"
// A weight gradient: f16 operands, f32 result, accumulated over the
// micro-batches and all-reduced in f32.
// TG: %[[G:.*]] = shoal.gemm %{{.*}}, %{{.*}} {shoal.phase = "backward", transA = true} : (tensor<2x24xf16>, tensor<2x32xf16>) -> tensor<24x32xf32>
// TG-NEXT: shoal.all_reduce %[[G]] over ["mb", "dp"] : tensor<24x32xf32>
// A bias gradient: an f16 reduction with an f32 result.
// TG: %[[B:.*]] = shoal.reduce_sum %{{.*}} {axes = array<i64: 0>, keepdims = false, shoal.phase = "backward"} : (tensor<2x32xf16>) -> tensor<32xf32>
// TG-NEXT: shoal.all_reduce %[[B]] over ["mb", "dp"] : tensor<32xf32>
// TG: shoal.task_graph "model.opt" {{.*}}(%{{.*}} : tensor<24x32xf32>, tensor<32x128xf32>, tensor<32xf32>, tensor<128x32xf32>, tensor<128xf32>)
// TG: shoal.adamw {{.*}} : tensor<24x32xf32>, tensor<24x32xf32>, tensor<24x32xf32>, tensor<24x32xf32>

// BADNAME: 'precision' must be fp32, bf16, fp16, bf16-autocast or fp16-autocast, got 'bf8'

// EMB: %[[E:.*]] = shoal.gather %{{.*}}, %{{.*}} {{.*}} -> tensor<2x4x16xf32>
// EMB-NEXT: %[[L:.*]] = shoal.cast %[[E]] {shoal.precision_cast{{.*}}} : (tensor<2x4x16xf32>) -> tensor<2x4x16xbf16>
// EMB-NEXT: %[[R:.*]] = shoal.all_reduce %[[L]] over ["tp"] : tensor<2x4x16xbf16>
// EMB-NEXT: %[[T:.*]] = shoal.tanh %[[R]] : (tensor<2x4x16xbf16>) -> tensor<2x4x16xbf16>
// float32's lowest saturates to bf16's (rounded, it would be -inf).
// EMB-NEXT: %[[K:.*]] = shoal.constant dense<-3.389530e+38> : tensor<bf16>
// EMB-NEXT: shoal.mul %[[T]], %[[K]]
module attributes {shoal.mesh = #shoal.mesh<["tp"], [2]>} {
  func.func @main(%ids: tensor<2x4xi64>) -> tensor<f32> {
    %w = shoal.weight "wte" : tensor<8x16xf32>
    %e = shoal.gather %w, %ids {shard_axes = ["tp"], shard_size = 16 : i64} : (tensor<8x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
    %r = shoal.all_reduce %e over ["tp"] : tensor<2x4x16xf32>
    %c = shoal.cast %r : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %t0 = shoal.tanh %c : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %lowest = shoal.constant dense<-3.40282347E+38> : tensor<f32>
    %t = shoal.mul %t0, %lowest : (tensor<2x4x16xf32>, tensor<f32>) -> tensor<2x4x16xf32>
    %s = shoal.reduce_sum %t {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x4x16xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}
