// shoal-propagate-sharding through a reshape that regroups dimensions
// (multi-head attention's [B, H*D] -> [B*H, D]): the dimensions share the
// factors B, H and D, so the batch split over dp is the major factor of
// B*H on the way in and of B on the way back, and nothing is gathered. A
// regrouping whose sizes do not divide ([4, 6] -> [6, 4]) stays whole.
// RUN: shoal-opt %s --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding | FileCheck %s
// RUN: shoal-opt %s --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition | FileCheck %s --check-prefix=PART

// Three factors (B, H, D), dp on B.
// CHECK: shoal.reshape %{{.*}} {shoal.factor_sharding = {{\[}}["dp"], [], []], shoal.sharding = [#shoal.sharding<{{\[}}["dp"], []]>]} : (tensor<4x8xf32>) -> tensor<8x4xf32>
// CHECK: shoal.softmax {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], []]>]
// CHECK: shoal.reshape %{{.*}} {shoal.factor_sharding = {{\[}}["dp"], [], []], shoal.sharding = [#shoal.sharding<{{\[}}["dp"], []]>]} : (tensor<8x4xf32>) -> tensor<4x8xf32>
// Sizes that do not divide: every dimension is one whole factor.
// CHECK: shoal.reshape %{{.*}} {shoal.factor_sharding = {{\[}}[], [], [], []], shoal.sharding = [#shoal.sharding<{{\[}}[], []]>]} : (tensor<4x6xf32>) -> tensor<6x4xf32>

// The local program: 2 of the 4 samples, 4 of the 8 heads' rows; the
// non-dividing regroup gathers once, before it.
// PART: shoal.reshape {{.*}} : (tensor<2x8xf32>) -> tensor<4x4xf32>
// PART: shoal.softmax {{.*}} : (tensor<4x4xf32>) -> tensor<4x4xf32>
// PART: shoal.reshape {{.*}} : (tensor<4x4xf32>) -> tensor<2x8xf32>
// PART: shoal.all_gather
// PART-NEXT: shoal.reshape {{.*}} : (tensor<4x6xf32>) -> tensor<6x4xf32>

module {
  func.func @main(%x: tensor<4x8xf32> {shoal.name = "x"}, %z: tensor<4x6xf32> {shoal.name = "z"}) -> (tensor<4x8xf32> {shoal.name = "y"}, tensor<6x4xf32> {shoal.name = "w"}) {
    %h = shoal.reshape %x : (tensor<4x8xf32>) -> tensor<8x4xf32> loc("/heads/Reshape")
    %s = shoal.softmax %h {axis = 1 : i64} : (tensor<8x4xf32>) -> tensor<8x4xf32> loc("/attn/Softmax")
    %y = shoal.reshape %s : (tensor<8x4xf32>) -> tensor<4x8xf32> loc("/merge/Reshape")
    %w = shoal.reshape %z : (tensor<4x6xf32>) -> tensor<6x4xf32> loc("/other/Reshape")
    return %y, %w : tensor<4x8xf32>, tensor<6x4xf32>
  }
}
