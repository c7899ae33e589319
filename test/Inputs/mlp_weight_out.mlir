// The MLP of mlp.mlir that also returns fc3's weight as a graph output.
module attributes {shoal.source = "/models/mlp.onnx"} {
  func.func @main(%x: tensor<8x32xf32> {shoal.name = "x"}) -> (tensor<8x24xf32> {shoal.name = "y"}, tensor<24x32xf32> {shoal.name = "w"}) {
    %w1 = shoal.weight "fc1.weight" : tensor<128x32xf32> loc("fc1.weight")
    %b1 = shoal.weight "fc1.bias" : tensor<128xf32> loc("fc1.bias")
    %h = shoal.gemm %x, %w1, %b1 {transB = true} : (tensor<8x32xf32>, tensor<128x32xf32>, tensor<128xf32>) -> tensor<8x128xf32> loc("/fc1/Gemm")
    %g = shoal.erf %h : (tensor<8x128xf32>) -> tensor<8x128xf32> loc("/act/Erf")
    %w2 = shoal.weight "fc2.weight" : tensor<32x128xf32> loc("fc2.weight")
    %b2 = shoal.weight "fc2.bias" : tensor<32xf32> loc("fc2.bias")
    %o = shoal.gemm %g, %w2, %b2 {transB = true} : (tensor<8x128xf32>, tensor<32x128xf32>, tensor<32xf32>) -> tensor<8x32xf32> loc("/fc2/Gemm")
    %r = shoal.relu %o : (tensor<8x32xf32>) -> tensor<8x32xf32> loc("/relu/Relu")
    %w3 = shoal.weight "fc3.weight" : tensor<24x32xf32> loc("fc3.weight")
    %y = shoal.gemm %r, %w3 {transB = true} : (tensor<8x32xf32>, tensor<24x32xf32>) -> tensor<8x24xf32> loc("/fc3/Gemm")
    return %y, %w3 : tensor<8x24xf32>, tensor<24x32xf32>
  }
}
