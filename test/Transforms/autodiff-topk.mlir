// shoal-autodiff: TopK's gradient (a mixture of experts' routing weights,
// the top-k of a softmax over the experts: transformers 5's Mixtral). The
// values are the input's elements at the returned indices, distinct within
// a row, so the values' gradient goes back to those positions: a
// ScatterElements of it into zeros along the axis, at the forward's
// indices. The indices (integers) get none. Checked against PyTorch by
// test/zoo/run_zoo.py --torch2 --exporter dynamo --models mixtral_bmm
// --layouts train-1 (docs/ModelFamilies.md).
// RUN: shoal-opt %s --shoal-autodiff="loss=mse" | FileCheck %s

// CHECK: %[[T:.*]]:2 = shoal.onnx "TopK"(%[[P:.*]]) {axis = -1 : i64, k = 2 : i64, largest = 1 : i64, sorted = 1 : i64} : (tensor<6x4xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
// CHECK: %[[Z:.*]] = shoal.constant {{.*}}dense<0.000000e+00> : tensor<6x4xf32>
// CHECK-NEXT: %[[G:.*]] = shoal.onnx "ScatterElements"(%[[Z]], %[[T]]#1, %{{.*}}) {axis = 1 : i64} {{.*}}: (tensor<6x4xf32>, tensor<6x2xi64>, tensor<6x2xf32>) -> tensor<6x4xf32>
// CHECK-NEXT: shoal.softmax_grad %[[P]], %[[G]]

module attributes {shoal.source = "/models/topk.onnx"} {
  func.func @main(%x: tensor<6x8xf32> {shoal.name = "x"}) -> (tensor<6x2xf32> {shoal.name = "y"}) {
    %w = shoal.weight "router" : tensor<8x4xf32>
    %l = shoal.matmul %x, %w : (tensor<6x8xf32>, tensor<8x4xf32>) -> tensor<6x4xf32>
    %p = shoal.softmax %l {axis = -1 : i64} : (tensor<6x4xf32>) -> tensor<6x4xf32>
    %v, %i = shoal.onnx "TopK"(%p) {axis = -1 : i64, k = 2 : i64, largest = 1 : i64, sorted = 1 : i64} : (tensor<6x4xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
    return %v : tensor<6x2xf32>
  }
}
