// fc1 -> Reciprocal -> fc2: an elementwise op that turns zero padding into
// infinity, so an uneven split must not be carried through it.
module attributes {shoal.source = "/models/recip.onnx"} {
  func.func @main(%x: tensor<8x32xf32> {shoal.name = "x"}) -> (tensor<8x24xf32> {shoal.name = "y"}) {
    %w1 = shoal.weight "w1" : tensor<128x32xf32> loc("w1")
    %b1 = shoal.weight "b1" : tensor<128xf32> loc("b1")
    %h = shoal.gemm %x, %w1, %b1 {transB = true} : (tensor<8x32xf32>, tensor<128x32xf32>, tensor<128xf32>) -> tensor<8x128xf32> loc("/fc1/Gemm")
    %r = shoal.reciprocal %h : (tensor<8x128xf32>) -> tensor<8x128xf32> loc("/act/Reciprocal")
    %w2 = shoal.weight "w2" : tensor<24x128xf32> loc("w2")
    %b2 = shoal.weight "b2" : tensor<24xf32> loc("b2")
    %y = shoal.gemm %r, %w2, %b2 {transB = true} : (tensor<8x128xf32>, tensor<24x128xf32>, tensor<24xf32>) -> tensor<8x24xf32> loc("/fc2/Gemm")
    return %y : tensor<8x24xf32>
  }
}
