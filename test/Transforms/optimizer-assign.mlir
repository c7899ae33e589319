// shoal-optimizer puts the importer's shoal.assign (a train-mode
// BatchNorm's running statistic written back) in the optimizer phase, after
// the backward, in the scope of the weight's first reader; the running
// statistic gets no gradient and no AdamW update.
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_one_scope.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[RM:.*]] = shoal.weight "bn.running_mean"
// CHECK-NOT: shoal.assign
// CHECK: shoal.phase = "backward"
// CHECK: shoal.assign %[[RM]], %{{.*}} {shoal.phase = "optimizer", shoal.scope = "s0"} : tensor<8xf32>, tensor<8xf32>
// CHECK-NOT: shoal.phase = "backward"
// CHECK: shoal.adamw {{.*}}shoal.phase = "optimizer"{{.*}} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
// CHECK-NOT: shoal.adamw
// CHECK: return

module {
  func.func @main(%x: tensor<4x8xf32> {shoal.name = "x"}) -> (tensor<4x8xf32> {shoal.name = "y"}) {
    %g = shoal.weight "bn.weight" : tensor<8xf32> loc("bn.weight")
    %rm = shoal.weight "bn.running_mean" : tensor<8xf32> loc("bn.running_mean")
    %y = shoal.mul %x, %g : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> loc("/s0/Mul")
    %s = shoal.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : (tensor<4x8xf32>) -> tensor<8xf32> loc("/s0/ReduceSum")
    %new = shoal.add %rm, %s : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32> loc("/s0/Add")
    shoal.assign %rm, %new : tensor<8xf32>, tensor<8xf32> loc("/s0/Assign")
    return %y : tensor<4x8xf32>
  }
}
