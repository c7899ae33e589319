// Sequence parallelism (Megatron-LM's) under split(2) with
// `sequence_parallel: true`: one pre-LN block (B=2, T=4, C=16). The hidden
// states between the tensor-parallel products are split along the
// sequence (dimension 1) over tp: the embedding's all_reduce becomes a
// reduce_scatter, each LayerNorm runs on its half of the sequence, one
// all_gather along the sequence feeds the q, k and v products (the weights'
// tp split beats the sequence split), and the attention output product's
// partial sums are reduce-scattered into the residual. In the backward the
// input gradients of the column-parallel products are added first and
// reduce-scattered once, each LayerNorm weight gradient sums its block of
// the sequence and all-reduces, and no hidden state is all-reduced.
// RUN: shoal-opt %inputs/gpt_block.mlir --shoal-annotate="spec=%inputs/spec_split2_sp.yaml" --shoal-autodiff --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition | FileCheck %s
// Errors name the spec line or the op.
// RUN: not shoal-opt %inputs/gpt_block.mlir --shoal-annotate="spec=%inputs/spec_sp_replicate.yaml" 2>&1 | FileCheck %s --check-prefix=REP
// RUN: not shoal-opt %inputs/gpt_block.mlir --shoal-annotate="spec=%inputs/spec_sp_bad.yaml" 2>&1 | FileCheck %s --check-prefix=BAD
// No silent fallback: a model without [batch, sequence, hidden]
// activations gets a warning and plain tensor parallelism.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_split2_sp.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition 2>&1 >/dev/null | FileCheck %s --check-prefix=NONE
// RUN: not shoal-opt %inputs/gpt_block.mlir --shoal-annotate="spec=%inputs/spec_split3_sp.yaml" --shoal-form-taskgraphs="world-size=3" --shoal-propagate-sharding 2>&1 | FileCheck %s --check-prefix=ODD

// CHECK-LABEL: shoal.task_graph "model" split(2)
// CHECK-SAME: shoal.sequence_parallel
// CHECK: %[[E:.*]] = shoal.gather {{.*}} -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[X:.*]] = shoal.reduce_scatter %[[E]] dim 1 over ["tp"] {shoal.reason = "sequence parallelism: {{.*}}"} : (tensor<2x4x16xf32>) -> tensor<2x2x16xf32>
// CHECK: %[[LN:.*]] = shoal.layer_norm %[[X]], {{.*}} -> tensor<2x2x16xf32>
// CHECK: %[[G:.*]] = shoal.all_gather %[[LN]] dim 1 over ["tp"] {shoal.reason = "sequence parallelism: {{.*}}"} : (tensor<2x2x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: shoal.matmul %[[G]], %{{.*}} : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NOT: all_gather
// CHECK: shoal.matmul %[[G]], %{{.*}} : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NOT: all_gather
// CHECK: shoal.matmul %[[G]], %{{.*}} : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[P:.*]] = shoal.matmul %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: shoal.reduce_scatter %[[P]] dim 1 over ["tp"] {{.*}} : (tensor<2x4x16xf32>) -> tensor<2x2x16xf32>
// Backward: LayerNorm gradients on the local half of the sequence; their
// weight gradients all-reduce 16 floats.
// CHECK: shoal.vocab_cross_entropy_grad
// CHECK: %[[DY:.*]] = shoal.reduce_scatter %{{.*}} dim 1 over ["tp"] {{.*}} : (tensor<2x4x16xf32>) -> tensor<2x2x16xf32>
// CHECK: shoal.layer_norm_grad %{{.*}}, %{{.*}}, %[[DY]] {shoal.phase = "backward"} : (tensor<2x2x16xf32>, tensor<16xf32>, tensor<2x2x16xf32>) -> tensor<2x2x16xf32>
// CHECK: %[[SG:.*]] = shoal.layer_norm_scale_grad %{{.*}}, %[[DY]] {shoal.grad_of = ["ln_f.weight"]{{.*}}} : (tensor<2x2x16xf32>, tensor<2x2x16xf32>) -> tensor<16xf32>
// CHECK-NEXT: shoal.all_reduce %[[SG]] over ["tp"] : tensor<16xf32>
// The q, k and v input gradients: added, then one reduce_scatter.
// CHECK: %[[S1:.*]] = shoal.add %{{.*}}, %{{.*}} {shoal.phase = "backward"} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[S2:.*]] = shoal.add %[[S1]], %{{.*}} {shoal.phase = "backward"} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[DX:.*]] = shoal.reduce_scatter %[[S2]] dim 1 over ["tp"] {{.*}} -> tensor<2x2x16xf32>
// CHECK-NEXT: shoal.layer_norm_grad %{{.*}}, %{{.*}}, %[[DX]]
// CHECK-NOT: shoal.all_reduce {{.*}} tensor<2x4x16xf32>

// REP: error: {{.*}}spec_sp_replicate.yaml:4: sequence_parallel needs a split scope{{.*}}(scope 'model' is replicate)
// BAD: error: {{.*}}spec_sp_bad.yaml:3: sequence_parallel must be true or false, got 'maybe'
// ODD: error: {{.*}}sequence_parallel in TaskGraph 'model': node '/h.0/ln_1/LayerNormalization' has a sequence of length 4, which cannot be split evenly over tp=3
// NONE: warning: {{.*}}sequence_parallel: TaskGraph 'model' splits nothing along the sequence (no activation of shape [batch, sequence, hidden]); it runs as plain tensor parallelism
