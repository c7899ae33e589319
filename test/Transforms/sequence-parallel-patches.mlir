// Sequence parallelism with a patch embedding (a ViT's): the convolution's
// [batch, channels, pixels] is rank 3 too, but its dimension 1 holds the
// channels, not the sequence. The hidden states are the values the
// LayerNorms normalize ([2, 4, 8]: 4 patches), so the sequence split starts
// where the patches become a sequence; the convolution stays whole (warned)
// and nothing moves the hidden dimension over tp (no all_to_all, no
// reduce_scatter of the hidden size). In the backward, the patches'
// gradient is gathered once for the convolution and no hidden state is
// all-reduced.
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2_sp.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition 2>&1 | FileCheck %s
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2_sp.yaml" --shoal-autodiff --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition 2>&1 | FileCheck %s --check-prefix=GRAD

// CHECK-NOT: all_to_all
// CHECK: shoal.onnx "Conv"{{.*}}shoal.tp_kept_whole{{.*}} -> tensor<2x8x2x2xf32>
// CHECK-NEXT: %[[F:.*]] = shoal.reshape {{.*}} -> tensor<2x8x4xf32>
// CHECK-NEXT: %[[S:.*]] = shoal.local_slice %[[F]] dim 2 over ["tp"] : (tensor<2x8x4xf32>) -> tensor<2x8x2xf32>
// CHECK-NEXT: shoal.transpose %[[S]] {{.*}} -> tensor<2x2x8xf32>
// CHECK: shoal.layer_norm {{.*}} -> tensor<2x2x8xf32>
// CHECK: shoal.all_gather %{{.*}} dim 1 over ["tp"]
// CHECK: shoal.reduce_scatter %{{.*}} dim 1 over ["tp"] {{.*}} : (tensor<2x4x8xf32>) -> tensor<2x2x8xf32>
// CHECK-NOT: all_to_all

// GRAD-NOT: all_to_all
// GRAD-NOT: shoal.all_reduce {{.*}} : tensor<{{[0-9]+}}x{{[0-9]+}}x{{[0-9]+}}xf32>
// GRAD: shoal.all_gather %{{.*}} dim 2 over ["tp"] {{.*}} : (tensor<2x8x1x2xf32>) -> tensor<2x8x2x2xf32>
// GRAD-NOT: all_to_all
// GRAD-NOT: shoal.all_reduce {{.*}} : tensor<{{[0-9]+}}x{{[0-9]+}}x{{[0-9]+}}xf32>

module {
  func.func @main(%px: tensor<2x3x4x4xf32> {shoal.name = "pixel_values"}) -> (tensor<2x4x8xf32> {shoal.name = "hidden"}) {
    %w = shoal.weight "patch.weight" : tensor<8x3x2x2xf32> loc("patch.weight")
    %b = shoal.weight "patch.bias" : tensor<8xf32> loc("patch.bias")
    %c = shoal.onnx "Conv"(%px, %w, %b) {dilations = array<i64: 1, 1>, group = 1 : i64, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x3x4x4xf32>, tensor<8x3x2x2xf32>, tensor<8xf32>) -> tensor<2x8x2x2xf32> loc("/patch/Conv")
    %f = shoal.reshape %c : (tensor<2x8x2x2xf32>) -> tensor<2x8x4xf32> loc("/patch/Flatten")
    %t = shoal.transpose %f {perm = array<i64: 0, 2, 1>} : (tensor<2x8x4xf32>) -> tensor<2x4x8xf32> loc("/patch/Transpose")
    %pos = shoal.weight "pos" : tensor<1x4x8xf32> loc("pos")
    %e = shoal.add %t, %pos : (tensor<2x4x8xf32>, tensor<1x4x8xf32>) -> tensor<2x4x8xf32> loc("/emb/Add")
    %g = shoal.weight "ln.weight" : tensor<8xf32> loc("ln.weight")
    %gb = shoal.weight "ln.bias" : tensor<8xf32> loc("ln.bias")
    %x = shoal.layer_norm %e, %g, %gb {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32> loc("/h.0/ln/LayerNormalization")
    %w1 = shoal.weight "fc1" : tensor<8x16xf32> loc("fc1")
    %h = shoal.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32> loc("/h.0/fc1/MatMul")
    %a = shoal.gelu %h : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32> loc("/h.0/act/Gelu")
    %w2 = shoal.weight "fc2" : tensor<16x8xf32> loc("fc2")
    %o = shoal.matmul %a, %w2 : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32> loc("/h.0/fc2/MatMul")
    %r = shoal.add %e, %o : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("/h.0/Add")
    return %r : tensor<2x4x8xf32>
  }
}
