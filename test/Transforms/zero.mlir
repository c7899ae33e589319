// shoal-zero on a DP2 x TP2 training step of the MLP (docs/Training.md,
// "ZeRO"). The ZeRO axes of a weight are the device axes it is replicated
// over: dp for the tp-split weights, dp and tp for fc2.bias (whole on every
// rank).
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-form-taskgraphs="world-size=4" --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-zero="stage=1" | FileCheck %s --check-prefix=Z1 --implicit-check-not='all_reduce {{.*}} over ["dp"] :'
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-form-taskgraphs="world-size=4" --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-zero="stage=3" | FileCheck %s --check-prefix=Z3
// With micro-batches (gradient accumulation in a pipeline stage), stages 1
// and 2 sum the whole gradient over them before scattering once per step,
// stage 3 scatters at every micro-batch and sums the block; all cross from
// the backward TaskGraph into the optimizer's as the block.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_mb2.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-zero="stage=1" | FileCheck %s --check-prefix=MB1
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_mb2.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-zero="stage=2" | FileCheck %s --check-prefix=MB2
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_mb2.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-zero="stage=3" | FileCheck %s --check-prefix=MB3
// Stage 0 changes nothing; a bad stage and a forward module are errors.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-form-taskgraphs="world-size=4" --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-zero="stage=0" | FileCheck %s --check-prefix=Z0
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-zero="stage=4" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-zero="stage=1" 2>&1 | FileCheck %s --check-prefix=FWD

// Stage 1: the gradient's all_reduce over dp is a reduce_scatter of dim 0;
// the state is the block (its sharding adds dp to dim 0, after tp where
// the weight is already split there); the update of the whole weight
// carries the ZeRO axes. fc2.bias: every tp rank has the whole gradient,
// summed over dp only: it is scattered over dp, then each tp rank keeps its
// half of the dp block.
// Z1: %[[W3:.*]] = shoal.weight "fc3.weight" {{.*}}shoal.sharding = [#shoal.sharding<{{\[\[}}"tp"], []]>]} : tensor<12x32xf32>
// Z1: %[[G3:.*]] = shoal.reduce_scatter %{{.*}} dim 0 over ["dp"] {shoal.reason = "ZeRO-1: gradient of 'fc3.weight'{{.*}}"} : (tensor<12x32xf32>) -> tensor<6x32xf32>
// Z1: %[[GB:.*]] = shoal.reduce_scatter %{{.*}} dim 0 over ["dp"] {shoal.reason = "ZeRO-1: gradient of 'fc2.bias'{{.*}}"} : (tensor<32xf32>) -> tensor<16xf32>
// Z1: %[[M3:.*]] = shoal.weight "adam.m/fc3.weight" {{.*}}shoal.sharding = [#shoal.sharding<{{\[\[}}"tp", "dp"], []]>], shoal.zero_init} : tensor<6x32xf32>
// Z1: %[[V3:.*]] = shoal.weight "adam.v/fc3.weight" {{.*}} : tensor<6x32xf32>
// Z1: shoal.adamw %[[W3]], %[[G3]], %[[M3]], %[[V3]] {{{.*}}shoal.zero_axes = ["dp"]{{.*}}} : tensor<12x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>
// Z1: shoal.weight "adam.m/fc2.bias" {{.*}}shoal.sharding = [#shoal.sharding<{{\[\[}}"dp", "tp"]]>], shoal.zero_init} : tensor<8xf32>
// Z1: %[[SB:.*]] = shoal.local_slice %[[GB]] dim 0 over ["tp"] {{.*}} : (tensor<16xf32>) -> tensor<8xf32>
// Z1: shoal.adamw %{{.*}}, %[[SB]], {{.*}}shoal.zero_axes = ["dp", "tp"]{{.*}} : tensor<32xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
// No gradient is all-reduced over dp any more (--implicit-check-not).

// Stage 3: the weight itself is the block, gathered before its forward
// and backward readers; the update is a plain one of blocks.
// Z3: %[[W1:.*]] = shoal.weight "fc1.weight" {{.*}}shoal.sharding = [#shoal.sharding<{{\[\[}}"tp", "dp"], []]>]} : tensor<32x32xf32>
// Z3: %[[A1:.*]] = shoal.all_gather %[[W1]] dim 0 over ["dp"] {shoal.reason = "ZeRO-3: 'fc1.weight' is stored split over dp and gathered for '/fc1/Gemm'"} : (tensor<32x32xf32>) -> tensor<64x32xf32>
// Z3: shoal.gemm %{{.*}}, %[[A1]]
// fc2.weight is gathered for its forward product and again for the
// backward one (the input gradient), each right before its reader.
// Z3: shoal.all_gather %{{.*}} dim 0 over ["dp"] {shoal.reason = "ZeRO-3: 'fc2.weight' is stored split over dp and gathered for '/fc2/Gemm'"} : (tensor<16x64xf32>) -> tensor<32x64xf32>
// Z3: shoal.all_gather %{{.*}} dim 0 over ["dp"] {shoal.phase = "backward", shoal.reason = "ZeRO-3: 'fc2.weight' is stored split over dp and gathered for '/fc2/Gemm'"} : (tensor<16x64xf32>) -> tensor<32x64xf32>
// Z3: shoal.adamw %[[W1]], %{{.*}}, %{{.*}}, %{{.*}} {{{.*}}} : tensor<32x32xf32>, tensor<32x32xf32>, tensor<32x32xf32>, tensor<32x32xf32>
// Z3-NOT: shoal.zero_axes

// MB1: shoal.task_graph "model.bwd"
// MB1: shoal.reduce_scatter %{{.*}} dim 0 over ["mb", "dp"] {{.*}} : (tensor<24x32xf32>) -> tensor<12x32xf32>
// MB1: shoal.task_graph "model.opt" {{.*}}tensor<12x32xf32>
// MB1: shoal.adamw {{.*}}shoal.zero_axes = ["dp"]{{.*}} : tensor<24x32xf32>, tensor<12x32xf32>, tensor<12x32xf32>, tensor<12x32xf32>

// Stage 2 too accumulates over the micro-batches first and scatters once
// per step (Megatron's distributed optimizer), not at every micro-batch.
// MB2: shoal.task_graph "model.bwd"
// MB2: shoal.reduce_scatter %{{.*}} dim 0 over ["mb", "dp"] {{.*}} : (tensor<24x32xf32>) -> tensor<12x32xf32>
// MB2-NOT: shoal.all_reduce %{{.*}} over ["mb"]
// MB2: shoal.task_graph "model.opt" {{.*}}tensor<12x32xf32>

// MB3: shoal.task_graph "model.bwd"
// MB3: %[[S:.*]] = shoal.reduce_scatter %{{.*}} dim 0 over ["dp"] {{.*}} : (tensor<24x32xf32>) -> tensor<12x32xf32>
// MB3-NEXT: shoal.all_reduce %[[S]] over ["mb"] : tensor<12x32xf32>

// Z0-NOT: reduce_scatter
// Z0-NOT: zero_axes

// BAD: shoal-zero: stage must be 0, 1, 2 or 3, got 4
// FWD: shoal-zero needs a training module
