// shoal-propagate-sharding keeps a split on a minor factor as a strided
// layout: nn.MultiheadAttention's [B, T, E] -> [T, B, E] -> [T*B, E]
// merges the batch into dimension 0 after the time, so the batch split
// over dp becomes outer = [T, 1] (T runs, a block of each per rank). Ops
// that treat the rows alike (the projection) keep it; the reshape back
// to [T, B, E] makes it a plain split again. Nothing is gathered on the
// way. An op that needs the rows whole (a softmax over them) or a weight
// holding the factor gathers the runs; so does a graph output.
// RUN: shoal-opt %s --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding | FileCheck %s
// RUN: shoal-opt %s --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition | FileCheck %s --check-prefix=PART

// CHECK: shoal.transpose {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}[], ["dp"], []]>]
// CHECK: shoal.reshape {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], []], outer = [3, 1]>]} : (tensor<3x4x8xf32>) -> tensor<12x8xf32>
// The projection's row factor is split in 3 runs.
// CHECK: shoal.matmul {{.*}}shoal.factor_outer = array<i64: 3, 1, 1>, shoal.factor_sharding = {{\[}}["dp"], [], []], shoal.sharding = [#shoal.sharding<{{\[}}["dp"], []], outer = [3, 1]>]}
// CHECK: shoal.reshape {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}[], ["dp"], []]>]} : (tensor<12x8xf32>) -> tensor<3x4x8xf32>
// CHECK: shoal.transpose {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], [], []]>]
// A softmax over the rows needs them whole.
// CHECK: shoal.softmax {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}[], []]>]
// A weight of the merged shape does not take the strided split.
// CHECK: shoal.weight "bias" {shoal.sharding = [#shoal.sharding<{{\[}}[], []]>]}
// CHECK: shoal.add {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}[], []]>]
// CHECK: shoal.add {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], []], outer = [3, 1]>]

// The local program: 2 samples of 4 in each of the 3 runs.
// PART-NOT: shoal.all_gather
// PART: shoal.reshape {{.*}} : (tensor<3x2x8xf32>) -> tensor<6x8xf32>
// PART-NEXT: shoal.weight "w"
// PART-NEXT: shoal.matmul {{.*}} : (tensor<6x8xf32>, tensor<8x8xf32>) -> tensor<6x8xf32>
// PART-NEXT: shoal.reshape {{.*}} : (tensor<6x8xf32>) -> tensor<3x2x8xf32>
// PART-NEXT: shoal.transpose {{.*}} : (tensor<3x2x8xf32>) -> tensor<2x3x8xf32>
// Gathering the runs: view them, gather each run's blocks, merge again
// (once, for both users).
// PART-NEXT: %[[RUNS:.*]] = shoal.reshape %{{.*}} : (tensor<6x8xf32>) -> tensor<3x2x8xf32>
// PART-NEXT: %[[ALL:.*]] = shoal.all_gather %[[RUNS]] dim 1 over ["dp"] : (tensor<3x2x8xf32>) -> tensor<3x4x8xf32>
// PART-NEXT: %[[WHOLE:.*]] = shoal.reshape %[[ALL]] : (tensor<3x4x8xf32>) -> tensor<12x8xf32>
// PART-NEXT: shoal.softmax %[[WHOLE]]
// PART: shoal.add %[[WHOLE]]
// A whole value added to the strided one is sliced into runs (a block of
// each), and the sum gathered for the output.
// PART-NEXT: %[[V:.*]] = shoal.reshape %{{.*}} : (tensor<12x8xf32>) -> tensor<3x4x8xf32>
// PART-NEXT: %[[S:.*]] = shoal.local_slice %[[V]] dim 1 over ["dp"] : (tensor<3x4x8xf32>) -> tensor<3x2x8xf32>
// PART-NEXT: %[[L:.*]] = shoal.reshape %[[S]] : (tensor<3x2x8xf32>) -> tensor<6x8xf32>
// PART-NEXT: %[[Q:.*]] = shoal.add %{{.*}}, %[[L]] : (tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<6x8xf32>
// PART-NEXT: shoal.reshape %[[Q]] : (tensor<6x8xf32>) -> tensor<3x2x8xf32>
// PART-NEXT: shoal.all_gather

module {
  func.func @main(%x: tensor<4x3x8xf32> {shoal.name = "x"}) -> (tensor<4x3x8xf32> {shoal.name = "y"}, tensor<12x8xf32> {shoal.name = "s"}, tensor<12x8xf32> {shoal.name = "b"}, tensor<12x8xf32> {shoal.name = "q"}) {
    %t = shoal.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<4x3x8xf32>) -> tensor<3x4x8xf32> loc("/attn/Transpose")
    %m = shoal.reshape %t : (tensor<3x4x8xf32>) -> tensor<12x8xf32> loc("/attn/Reshape")
    %w = shoal.weight "w" : tensor<8x8xf32> loc("/attn/w")
    %p = shoal.matmul %m, %w : (tensor<12x8xf32>, tensor<8x8xf32>) -> tensor<12x8xf32> loc("/attn/out_proj/MatMul")
    %r = shoal.reshape %p : (tensor<12x8xf32>) -> tensor<3x4x8xf32> loc("/attn/Reshape_1")
    %y = shoal.transpose %r {perm = array<i64: 1, 0, 2>} : (tensor<3x4x8xf32>) -> tensor<4x3x8xf32> loc("/attn/Transpose_1")
    %s = shoal.softmax %m {axis = 0 : i64} : (tensor<12x8xf32>) -> tensor<12x8xf32> loc("/rows/Softmax")
    %bias = shoal.weight "bias" : tensor<12x8xf32> loc("/rows/bias")
    %b = shoal.add %m, %bias : (tensor<12x8xf32>, tensor<12x8xf32>) -> tensor<12x8xf32> loc("/rows/Add")
    %q = shoal.add %m, %s : (tensor<12x8xf32>, tensor<12x8xf32>) -> tensor<12x8xf32> loc("/rows/Add_1")
    return %y, %s, %b, %q : tensor<4x3x8xf32>, tensor<12x8xf32>, tensor<12x8xf32>, tensor<12x8xf32>
  }
}
