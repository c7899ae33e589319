// Batch blocks (docs/Planner.md "Uneven batch shares"): shoal-plan gives the
// replicas of one replicated scope on devices of different speeds their own
// local batch (shoal.batch_blocks, samples per replica); shoal-partition
// keeps the even types, marks every value whose blocks differ between ranks
// (shoal.uneven_layouts), the graph inputs too (shoal.uneven_arg_layouts),
// and the plan export writes them as Program.uneven_axes and value_layouts.

// From shoal-plan: the GPT's 32 sequences on 8 V100 + 8 T4 (forward), 3
// per V100 and 1 per T4; the logits, a graph output, in blocks too.
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_dp.yaml" --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition 2>&1 | FileCheck %s --check-prefix=GPT
// GPT-NOT: warning
// GPT: shoal.task_graph "all" replicate(16) mesh <["dp", "tp"], [1, 16]>
// GPT-SAME: shoal.uneven = {axis = "tp", multiple = 1 : i64, weights = array<i64: 3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1>}
// GPT-SAME: shoal.uneven_arg_layouts = [{global_shape = array<i64: 32, 512>, sharding = #shoal.sharding<{{\[\["tp"\], \[\]\]}}>}]
// GPT: shoal.matmul {{.*}}shoal.uneven_layouts = [{global_shape = array<i64: 32, 512, 8192>, sharding = #shoal.sharding<{{\[\["tp"\], \[\], \[\]\]}}>}]} : (tensor<2x512x1024xf32>, tensor<1024x8192xf32>) -> tensor<2x512x8192xf32>
// GPT-NEXT: shoal.yield

// A training step with the blocks set by hand (1 and 3 of the 4 samples):
// the loss sums each block and scales by the global batch's elements
// (1/96); the gradient of that mean, an expand sliced to a block, becomes an
// expand to each rank's own block.
// RUN: shoal-opt %s --split-input-file --shoal-autodiff="loss=mse" --mlir-print-debuginfo | shoal-opt --split-input-file --shoal-parallelize="spec=%inputs/spec_replicate2.yaml" 2>/dev/null | FileCheck %s --check-prefix=TRAIN
// RUN: shoal-opt %s --split-input-file --shoal-autodiff="loss=mse" --mlir-print-debuginfo | shoal-opt --split-input-file --shoal-parallelize="spec=%inputs/spec_replicate2.yaml" 2>&1 >/dev/null | FileCheck %s --check-prefix=REFUSE
// RUN: shoal-opt %s --split-input-file --shoal-autodiff="loss=mse" --mlir-print-debuginfo | shoal-opt --split-input-file --shoal-parallelize="spec=%inputs/spec_replicate2.yaml" 2>/dev/null | shoal-translate --split-input-file --export-plan-text | FileCheck %s --check-prefix=PLAN
// TRAIN: shoal.task_graph "all" replicate(2) mesh <["dp", "tp"], [1, 2]>
// TRAIN-SAME: shoal.uneven = {axis = "tp", multiple = 1 : i64, weights = array<i64: 1, 3>}
// TRAIN-SAME: shoal.uneven_arg_layouts = [{global_shape = array<i64: 4, 32>, sharding = #shoal.sharding<{{\[\["tp"\], \[\]\]}}>}, {global_shape = array<i64: 4, 24>, sharding = #shoal.sharding<{{\[\["tp"\], \[\]\]}}>}]
// TRAIN: shoal.gemm {{.*}}shoal.uneven_layouts = [{global_shape = array<i64: 4, 128>, sharding = #shoal.sharding<{{\[\["tp"\], \[\]\]}}>}], transB = true} : (tensor<2x32xf32>
// TRAIN: %[[SUM:.*]] = shoal.reduce_sum
// TRAIN-NEXT: shoal.all_reduce %[[SUM]] over ["tp"] : tensor<f32>
// TRAIN-NEXT: shoal.constant dense<0.010416667> : tensor<f32>
// TRAIN: shoal.expand {{.*}}shoal.uneven_layouts = [{global_shape = array<i64: 4, 24>, sharding = #shoal.sharding<{{\[\["tp"\], \[\]\]}}>}]} : (tensor<1x1xf32>) -> tensor<2x24xf32>
// TRAIN-NOT: shoal.local_slice
// The weight gradients: summed over the replicas, whole on every rank.
// TRAIN: %[[G:.*]] = shoal.gemm %{{.*}}, %{{.*}} {shoal.grad_of = ["fc2.weight"], shoal.phase = "backward", transA = true} : (tensor<2x128xf32>, tensor<2x24xf32>) -> tensor<128x24xf32>
// TRAIN-NEXT: shoal.all_reduce %[[G]] over ["tp"] : tensor<128x24xf32>

// The plan: the input ports' values (0 and 1) have value layouts.
// PLAN: inputs {
// PLAN-NEXT: name: "x"
// PLAN: uneven_axes {
// PLAN-NEXT: axis: "tp"
// PLAN-NEXT: weights: 1
// PLAN-NEXT: weights: 3
// PLAN-NEXT: multiple: 1
// PLAN-NEXT: }
// PLAN-NEXT: value_layouts {
// PLAN-NEXT: global_type {
// PLAN-NEXT: dtype: F32
// PLAN-NEXT: shape: 4
// PLAN-NEXT: shape: 32
// PLAN: value_layouts {
// PLAN-NEXT: value: 1
// PLAN-NEXT: global_type {
// PLAN-NEXT: dtype: F32
// PLAN-NEXT: shape: 4
// PLAN-NEXT: shape: 24

module attributes {shoal.batch_blocks = {all = array<i64: 1, 3>}, shoal.source = "/models/mlp.onnx"} {
  func.func @main(%x: tensor<4x32xf32> {shoal.name = "x"}) -> (tensor<4x24xf32> {shoal.name = "y"}) {
    %w1 = shoal.weight "fc1.weight" : tensor<128x32xf32> loc("fc1.weight")
    %b1 = shoal.weight "fc1.bias" : tensor<128xf32> loc("fc1.bias")
    %h = shoal.gemm %x, %w1, %b1 {transB = true} : (tensor<4x32xf32>, tensor<128x32xf32>, tensor<128xf32>) -> tensor<4x128xf32> loc("/fc1/Gemm")
    %w2 = shoal.weight "fc2.weight" : tensor<128x24xf32> loc("fc2.weight")
    %o = shoal.matmul %h, %w2 : (tensor<4x128xf32>, tensor<128x24xf32>) -> tensor<4x24xf32> loc("/fc2/MatMul")
    return %o : tensor<4x24xf32>
  }
}

// -----

// An op that does not take blocks of different sizes (an ONNX Slice, whose
// attributes fix its shape): the TaskGraph keeps equal blocks, and says why.
// Only this module warns.
// REFUSE-NOT: warning
// REFUSE: warning: {{.*}}shoal-partition: the batch blocks by speed of TaskGraph 'all' over 'tp' (1/3) are not compiled: 'shoal.onnx' (/slice/Slice) does not take blocks of different sizes; every rank gets an equal block
// REFUSE-NOT: warning
// TRAIN: module attributes {shoal.batch_blocks = {all = array<i64: 1, 3>}{{.*}}slice.onnx
// TRAIN-NOT: shoal.uneven
module attributes {shoal.batch_blocks = {all = array<i64: 1, 3>}, shoal.source = "/models/slice.onnx"} {
  func.func @main(%x: tensor<4x32xf32> {shoal.name = "x"}) -> (tensor<4x16xf32> {shoal.name = "y"}) {
    %w2 = shoal.weight "fc2.weight" : tensor<32x24xf32> loc("fc2.weight")
    %o = shoal.matmul %x, %w2 : (tensor<4x32xf32>, tensor<32x24xf32>) -> tensor<4x24xf32> loc("/fc2/MatMul")
    %c = shoal.onnx "Slice"(%o) {axes = array<i64: 1>, ends = array<i64: 16>, starts = array<i64: 0>} : (tensor<4x24xf32>) -> tensor<4x16xf32> loc("/slice/Slice")
    return %c : tensor<4x16xf32>
  }
}

