// A softmax over the batch dimension: it mixes the samples of a batch, so
// it cannot run on micro-batches.
module {
  func.func @main(%x: tensor<8x4xf32> {shoal.name = "x"}) -> (tensor<8x4xf32> {shoal.name = "y"}) {
    %y = shoal.softmax %x {axis = 0 : i64} : (tensor<8x4xf32>) -> tensor<8x4xf32> loc("/sm/Softmax")
    return %y : tensor<8x4xf32>
  }
}
