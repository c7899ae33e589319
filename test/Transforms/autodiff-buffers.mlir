// shoal-autodiff trains a float initializer only if a gradient reaches it:
// one read through a comparison (a mask as a Where condition), a cast to
// integers (position ids stored as floats), Floor, or only by an output the
// loss does not read gets no gradient, so shoal-optimizer gives it no update
// and no optimizer state. A remark and the parallelism report name them.
// RUN: shoal-opt %s --shoal-autodiff="loss=mse output=y" --shoal-optimizer 2>%t.err | FileCheck %s --implicit-check-not=shoal.adamw --implicit-check-not=shoal.zero_init
// RUN: FileCheck %s --check-prefix=REMARK < %t.err
// RUN: shoal-opt %s --shoal-autodiff="loss=mse output=y" --shoal-optimizer --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-partition --shoal-report -o /dev/null 2>/dev/null | FileCheck %s --check-prefix=REPORT
// Frozen initializers are not listed (the config named them).
// RUN: shoal-opt %s --shoal-autodiff="loss=mse output=y frozen=mask,other" 2>&1 >/dev/null | FileCheck %s --check-prefix=FROZEN
// When no gradient reaches any initializer there is nothing to train.
// RUN: not shoal-opt %s --shoal-autodiff="loss=mse output=y frozen=w,emb" 2>&1 | FileCheck %s --check-prefix=NONE

// CHECK: shoal.training = {grad_bucket_mb = {{.*}}, untrained = ["mask", "pos", "step", "other"]}
// CHECK-LABEL: func.func @main
// CHECK: %[[EMB:.*]] = shoal.weight "emb"
// CHECK: %[[W:.*]] = shoal.weight "w"
// CHECK: shoal.weight "adam.m/emb" {shoal.zero_init}
// CHECK: shoal.weight "adam.v/emb" {shoal.zero_init}
// CHECK: shoal.adamw %[[EMB]],
// CHECK: shoal.weight "adam.m/w" {shoal.zero_init}
// CHECK: shoal.weight "adam.v/w" {shoal.zero_init}
// CHECK: shoal.adamw %[[W]],
// CHECK: return

// REMARK: remark: shoal-autodiff: 4 float initializers get no gradient and are not trained (no differentiable path to the loss): 'mask', 'pos', 'step', 'other'

// REPORT: shoal parallelism report: 1 TaskGraph on 1 rank
// REPORT-NEXT: not trained (no gradient reaches them): 'mask', 'pos', 'step', 'other'

// FROZEN: remark: shoal-autodiff: 2 float initializers get no gradient and are not trained (no differentiable path to the loss): 'pos', 'step'

// NONE: error: nothing to train: no gradient reaches any float initializer

module attributes {shoal.source = "/models/buffers.onnx"} {
  func.func @main(%x: tensor<4x8xf32> {shoal.name = "x"}) -> (tensor<4x8xf32> {shoal.name = "y"}, tensor<4x8xf32> {shoal.name = "aux"}) {
    %emb = shoal.weight "emb" : tensor<16x8xf32>
    %w = shoal.weight "w" : tensor<8xf32>
    %mask = shoal.weight "mask" : tensor<4x8xf32>
    %pos = shoal.weight "pos" : tensor<4xf32>
    %step = shoal.weight "step" : tensor<8xf32>
    %other = shoal.weight "other" : tensor<4x8xf32>
    %zero = shoal.constant dense<0.0> : tensor<f32>
    %a = shoal.mul %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %c = shoal.greater %mask, %zero : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
    %m = shoal.where %c, %a, %zero : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
    %ids = shoal.cast %pos : (tensor<4xf32>) -> tensor<4xi64>
    %e = shoal.gather %emb, %ids {axis = 0 : i64} : (tensor<16x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
    %f = shoal.floor %step : (tensor<8xf32>) -> tensor<8xf32>
    %s = shoal.add %m, %e : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %y = shoal.mul %s, %f : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %o = shoal.add %other, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    return %y, %o : tensor<4x8xf32>, tensor<4x8xf32>
  }
}
