// In-place updates keep their state with their weight (issue 49): a weight
// whose forward keeps it whole while its gradient arrives split over tp (a
// layer applied twice, ALBERT's shared weights, sums gradients of two
// layouts) is updated whole, its AdamW moments and SGD momentum are stored
// whole like it, and shoal-partition gathers the gradient, never the state.
// Before, the update followed the gradient: the moments were stored split
// and gathered into temporaries that shoal.adamw wrote (stored moments stayed
// zero, training drifted from step 3).
// RUN: shoal-opt %s --shoal-propagate-sharding | FileCheck %s
// RUN: shoal-opt %s --shoal-propagate-sharding --shoal-partition | FileCheck %s --check-prefix=PART

// CHECK-LABEL: func.func @main
// CHECK: shoal.weight "w" {shoal.sharding = [#shoal.sharding<{{\[\[}}], ["tp"]]>]}
// CHECK: shoal.weight "b" {shoal.sharding = [#shoal.sharding<{{\[\[}}]]>]}
// CHECK: shoal.weight "c" {shoal.sharding = [#shoal.sharding<{{\[\[}}]]>]}
// The gradients arrive split over tp.
// CHECK: shoal.reduce_sum {{.*}}shoal.sharding = [#shoal.sharding<{{\[\[}}"tp"]]>]
// The updates and their state follow the weight.
// CHECK: shoal.weight "adam.m/b" {shoal.sharding = [#shoal.sharding<{{\[\[}}]]>], shoal.zero_init}
// CHECK: shoal.weight "adam.v/b" {shoal.sharding = [#shoal.sharding<{{\[\[}}]]>], shoal.zero_init}
// CHECK: shoal.adamw {{.*}}shoal.factor_sharding = {{\[\[}}]]
// CHECK: shoal.weight "sgd.momentum/c" {shoal.sharding = [#shoal.sharding<{{\[\[}}]]>], shoal.zero_init}
// CHECK: shoal.sgd {{.*}}shoal.factor_sharding = {{\[\[}}]]
// A split weight's state is split as the weight is.
// CHECK: shoal.weight "adam.m/w" {shoal.sharding = [#shoal.sharding<{{\[\[}}], ["tp"]]>], shoal.zero_init}
// CHECK: shoal.weight "adam.v/w" {shoal.sharding = [#shoal.sharding<{{\[\[}}], ["tp"]]>], shoal.zero_init}
// CHECK: shoal.adamw {{.*}}shoal.factor_sharding = {{\[\[}}], ["tp"]]

// PART-LABEL: func.func @main
// PART: %[[B:.*]] = shoal.weight "b" {{.*}} : tensor<16xf32>
// PART: %[[C:.*]] = shoal.weight "c" {{.*}} : tensor<16xf32>
// PART: %[[GB:.*]] = shoal.reduce_sum {{.*}} -> tensor<8xf32>
// PART: %[[M:.*]] = shoal.weight "adam.m/b" {{.*}} : tensor<16xf32>
// PART: %[[V:.*]] = shoal.weight "adam.v/b" {{.*}} : tensor<16xf32>
// PART: %[[G:.*]] = shoal.all_gather %[[GB]] dim 0 over ["tp"] : (tensor<8xf32>) -> tensor<16xf32>
// PART-NEXT: shoal.adamw %[[B]], %[[G]], %[[M]], %[[V]] {{.*}} : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
// PART: %[[BUF:.*]] = shoal.weight "sgd.momentum/c" {{.*}} : tensor<16xf32>
// PART: %[[G2:.*]] = shoal.all_gather %{{.*}} dim 0 over ["tp"] : (tensor<8xf32>) -> tensor<16xf32>
// PART-NEXT: shoal.sgd %[[C]], %[[G2]], %[[BUF]] {{.*}} : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
// PART: %[[MW:.*]] = shoal.weight "adam.m/w" {{.*}} : tensor<8x8xf32>
// PART-NOT: shoal.all_gather
// PART: shoal.adamw {{.*}}, %[[MW]], {{.*}} : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>

module attributes {shoal.scopes = [#shoal.scope<"s", split, 2>], shoal.training = {labels = "labels", loss = "loss", optimizer = "adamw"}} {
  func.func @main(%x: tensor<4x8xf32>, %h: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
    %r:2 = shoal.task_graph "s" split(2) mesh <["dp", "tp"], [1, 2]>(%x, %h : tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>, tensor<4x16xf32> {
    ^bb0(%a: tensor<4x8xf32>, %b0: tensor<4x16xf32>):
      %w = shoal.weight "w" : tensor<8x16xf32>
      %b = shoal.weight "b" : tensor<16xf32>
      %c = shoal.weight "c" : tensor<16xf32>
      // The forward: w column-split by its product, b and c whole.
      %y = shoal.matmul %a, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
      %z = shoal.add %b, %b0 : (tensor<16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
      %z2 = shoal.add %c, %z : (tensor<16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
      // Gradients made from the split product.
      %gb = shoal.reduce_sum %y {axes = array<i64: 0>, keepdims = false, shoal.phase = "backward"} : (tensor<4x16xf32>) -> tensor<16xf32>
      %gc = shoal.reduce_sum %y {axes = array<i64: 0>, keepdims = false, shoal.phase = "backward"} : (tensor<4x16xf32>) -> tensor<16xf32>
      %gw = shoal.gemm %a, %y {shoal.phase = "backward", transA = true} : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
      %m = shoal.weight "adam.m/b" {shoal.zero_init} : tensor<16xf32>
      %v = shoal.weight "adam.v/b" {shoal.zero_init} : tensor<16xf32>
      shoal.adamw %b, %gb, %m, %v {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, clip_norm = 0.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, min_lr = 0.000000e+00 : f64, shoal.phase = "optimizer", total_steps = 0 : i64, warmup_steps = 0 : i64, weight_decay = 0.000000e+00 : f64} : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
      %buf = shoal.weight "sgd.momentum/c" {shoal.zero_init} : tensor<16xf32>
      shoal.sgd %c, %gc, %buf {lr = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, weight_decay = 0.000000e+00 : f64, clip_norm = 0.000000e+00 : f64, warmup_steps = 0 : i64, total_steps = 0 : i64, min_lr = 0.000000e+00 : f64, shoal.phase = "optimizer"} : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
      %mw = shoal.weight "adam.m/w" {shoal.zero_init} : tensor<8x16xf32>
      %vw = shoal.weight "adam.v/w" {shoal.zero_init} : tensor<8x16xf32>
      shoal.adamw %w, %gw, %mw, %vw {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, clip_norm = 0.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, min_lr = 0.000000e+00 : f64, shoal.phase = "optimizer", total_steps = 0 : i64, warmup_steps = 0 : i64, weight_decay = 0.000000e+00 : f64} : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
      shoal.yield %y, %z2 : tensor<4x16xf32>, tensor<4x16xf32>
    }
    return %r#0, %r#1 : tensor<4x16xf32>, tensor<4x16xf32>
  }
}
