// shoal-recompute (docs/Training.md "Recomputation") on two layers named
// /h.0/... and /h.1/... and a head. full: each layer's values that the
// backward reads are recomputed from the layer's input right before the
// layer's backward; the layer inputs (%x, the first layer's residual sum)
// stay kept. selective: only the attention core (scores, scale, softmax).
// RUN: shoal-opt %inputs/two_layer_attention.mlir --shoal-autodiff="loss=mse" --shoal-recompute="mode=full" 2>&1 | FileCheck %s --check-prefix=FULL
// RUN: shoal-opt %inputs/two_layer_attention.mlir --shoal-autodiff="loss=mse" --shoal-recompute="mode=selective" 2>&1 | FileCheck %s --check-prefix=SEL --implicit-check-not="shoal.tanh {{.*}}shoal.recomputed"
// A scope's `recompute:` wins over the mode (here none): only layer 0.
// RUN: shoal-opt %inputs/two_layer_attention.mlir --shoal-annotate="spec=%inputs/spec_recompute_h0.yaml" --shoal-autodiff="loss=mse" --shoal-recompute 2>&1 | FileCheck %s --check-prefix=SCOPE
// none changes nothing; bad modes and a forward module are errors.
// RUN: shoal-opt %inputs/two_layer_attention.mlir --shoal-autodiff="loss=mse" --shoal-recompute="mode=none" | FileCheck %s --check-prefix=NONE --implicit-check-not=shoal.recomputed
// RUN: not shoal-opt %inputs/two_layer_attention.mlir --shoal-autodiff="loss=mse" --shoal-recompute="mode=half" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not shoal-opt %inputs/two_layer_attention.mlir --shoal-recompute="mode=full" 2>&1 | FileCheck %s --check-prefix=FWD
// RUN: not shoal-opt %inputs/two_layer_attention.mlir --shoal-annotate="spec=%inputs/spec_recompute_bad.yaml" 2>&1 | FileCheck %s --check-prefix=SPEC

// FULL: remark: shoal-recompute: 8 forward values are recomputed in the backward by 14 cloned ops, in 2 segments
// Forward: layer 1's query product had several users (marked for shoal-fuse).
// FULL: %[[R0:.*]] = shoal.add %arg0, %{{.*}} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
// FULL: %[[W1:.*]] = shoal.weight "h.1.q"
// FULL: shoal.matmul %[[R0]], %[[W1]] {shoal.multi_use = array<i64: 0>}
// The head's gradient first, then layer 1 recomputed from its input R0.
// FULL: shoal.gemm {{.*}}shoal.grad_of = ["head"]
// FULL: %[[Q1:.*]] = shoal.matmul %[[R0]], %[[W1]] {shoal.multi_use = array<i64: 0>, shoal.phase = "backward", shoal.recomputed}
// FULL: %[[K1:.*]] = shoal.transpose %[[Q1]] {{.*}}shoal.recomputed
// FULL: %[[S1:.*]] = shoal.matmul %[[Q1]], %[[K1]] {shoal.phase = "backward", shoal.recomputed}
// FULL: %[[M1:.*]] = shoal.mul %[[S1]], {{.*}}shoal.recomputed
// FULL: %[[P1:.*]] = shoal.softmax %[[M1]] {{.*}}shoal.recomputed
// FULL: %[[O1:.*]] = shoal.matmul %[[P1]], %[[Q1]] {{.*}}shoal.recomputed
// FULL: %[[T1:.*]] = shoal.tanh %[[O1]] {{.*}}shoal.recomputed
// FULL: shoal.mul %[[T1]], %[[T1]] {shoal.phase = "backward"}
// FULL: shoal.softmax_grad %[[P1]]
// FULL: shoal.gemm {{.*}}shoal.grad_of = ["h.1.q"]
// Layer 0, from the graph input.
// FULL: shoal.matmul %arg0, %{{.*}} {shoal.multi_use = array<i64: 0>, shoal.phase = "backward", shoal.recomputed}
// FULL: shoal.gemm {{.*}}shoal.grad_of = ["h.0.q"]

// SEL: remark: shoal-recompute: 2 forward values are recomputed in the backward by 6 cloned ops, in 2 segments
// SEL: shoal.gemm {{.*}}shoal.grad_of = ["head"]
// SEL: %[[S1:.*]] = shoal.matmul %{{.*}}, %{{.*}} {shoal.phase = "backward", shoal.recomputed}
// SEL: %[[P1:.*]] = shoal.softmax %{{.*}} {{.*}}shoal.recomputed
// SEL: shoal.softmax_grad %[[P1]]

// SCOPE: remark: shoal-recompute: 4 forward values are recomputed in the backward by 7 cloned ops, in 1 segments
// SCOPE: shoal.gemm {{.*}}shoal.grad_of = ["h.1.q"]
// SCOPE: shoal.matmul %arg0, %{{.*}}shoal.recomputed

// NONE: shoal.gemm {{.*}}shoal.grad_of = ["h.0.q"]
// BAD: error: unknown recompute mode 'half' (expected none, full or selective)
// FWD: error: shoal-recompute needs a training module (run shoal-autodiff first)
// SPEC: error: {{.*}}spec_recompute_bad.yaml:4: recompute must be none, full or selective, got 'sometimes'
