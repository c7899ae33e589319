// Propagated IR whose state is laid out unlike its weight: "b" has no
// layout (whole), its first moment is split over tp. shoal-partition must
// refuse it rather than gather the moment into a temporary that shoal.adamw
// would write (in-place-update-errors.mlir).
module attributes {shoal.scopes = [#shoal.scope<"s", split, 2>], shoal.training = {labels = "labels", loss = "loss", optimizer = "adamw"}} {
  func.func @main(%arg0: tensor<4x32xf32> {shoal.sharding = #shoal.sharding<[[], []]>}) -> (tensor<4x32xf32> {shoal.sharding = #shoal.sharding<[[], []]>}) {
    %0 = shoal.task_graph "s" split(2) mesh <["dp", "tp"], [1, 2]>(%arg0 : tensor<4x32xf32>) -> tensor<4x32xf32> attributes {shoal.arg_shardings = [#shoal.sharding<[[], []]>], shoal.in_shardings = [#shoal.sharding<[[], []]>], shoal.sharding = [#shoal.sharding<[[], []]>]} {
    ^bb0(%arg1: tensor<4x32xf32>):
      %1 = shoal.weight "b" : tensor<32xf32>
      %2 = shoal.add %1, %arg1 {shoal.factor_sharding = [[], []], shoal.sharding = [#shoal.sharding<[[], []]>]} : (tensor<32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
      %3 = shoal.reduce_sum %arg1 {axes = array<i64: 0>, keepdims = false, shoal.factor_sharding = [[], []], shoal.phase = "backward", shoal.sharding = [#shoal.sharding<[[]]>]} : (tensor<4x32xf32>) -> tensor<32xf32>
      %4 = shoal.weight "adam.m/b" {shoal.sharding = [#shoal.sharding<[["tp"]]>], shoal.zero_init} : tensor<32xf32>
      %5 = shoal.weight "adam.v/b" {shoal.sharding = [#shoal.sharding<[[]]>], shoal.zero_init} : tensor<32xf32>
      shoal.adamw %1, %3, %4, %5 {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, clip_norm = 0.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, min_lr = 0.000000e+00 : f64, shoal.factor_sharding = [[]], shoal.phase = "optimizer", shoal.sharding = [], total_steps = 0 : i64, warmup_steps = 0 : i64, weight_decay = 0.000000e+00 : f64} : tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
      shoal.yield %2 : tensor<4x32xf32>
    }
    return %0 : tensor<4x32xf32>
  }
}

