// shoal.plan placements that put two stages on rank 0.
module attributes {shoal.num_micro_batch = 2 : i64, shoal.plan = {placements = [array<i64: 0, 1>, array<i64: 0, 1>]}, shoal.scopes = [#shoal.scope<"a", replicate, 1>, #shoal.scope<"b", replicate, 1>]} {
  func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %0 = shoal.relu %x {shoal.scope = "a"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %1 = shoal.relu %0 {shoal.scope = "b"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %1 : tensor<4x8xf32>
  }
}
