// The report's replicated-work check looks for values of the whole batch
// in a replicate TaskGraph. A weight's gradient has the weight's shape
// whatever the batch: a table of 2 rows (BERT's token types) when the batch
// is 2 is summed over dp, not computed whole, and no warning is given.
// RUN: rm -rf %t && mkdir -p %t
// RUN: printf 'version: 1\nloss: {kind: mse, output: y, labels: labels}\noptimizer: {kind: sgd, lr: 0.1}\n' > %t/sgd.yaml
// RUN: shoal-opt %s --shoal-parallelize="spec=%inputs/spec_replicate2.yaml world-size=2 train=%t/sgd.yaml" --shoal-report -o /dev/null | FileCheck %s

// CHECK: all_reduce over dp at /types/Gather (backward): gradient of 'types.weight' summed over dp
// CHECK-NEXT: 2x8xf32, 64 B per rank
// CHECK-NOT: replicated work
// CHECK: total: 3 all_reduce, 1 local_slice; 0 warnings

module attributes {shoal.source = "/models/emb.onnx"} {
  func.func @main(%ids: tensor<2x4xi64> {shoal.name = "ids"}) -> (tensor<2x4x8xf32> {shoal.name = "y"}) {
    %t = shoal.weight "types.weight" : tensor<2x8xf32> loc("types.weight")
    %e = shoal.gather %t, %ids : (tensor<2x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32> loc("/types/Gather")
    %w = shoal.weight "fc.weight" : tensor<8x8xf32> loc("fc.weight")
    %y = shoal.matmul %e, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32> loc("/fc/MatMul")
    return %y : tensor<2x4x8xf32>
  }
}
