// ONNX names are bytes and need not be UTF-8, while a plan's string fields
// must be. Names that are keys (graph inputs and outputs, initializers) are
// `bytes` fields, kept exact; an op's node name (for errors and traces) is
// written with each byte outside valid UTF-8 as \xNN and `\` as `\\`;
// valid names are unchanged. The plan parses (shoal-run used to refuse it:
// "not a valid shoal plan").
// RUN: shoal-opt %s --shoal-parallelize="world-size=1 fuse=false" --mlir-print-debuginfo | shoal-translate --export-plan-text | FileCheck %s

// CHECK: name: "x\377"
// CHECK: initializer: "w\376"
// CHECK-DAG: name: "/mm\\xFF\\\\node"
// CHECK-DAG: name: "/relu/\303\251"
module attributes {shoal.source = "/models/names.onnx"} {
func.func @main(%x: tensor<2x4xf32> {shoal.name = "x\FF"}) -> (tensor<2x4xf32> {shoal.name = "y"}) {
  %w = shoal.weight "w\FE" : tensor<4x4xf32> loc("w\FE")
  %0 = shoal.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("/mm\FF\\node")
  %1 = shoal.relu %0 : (tensor<2x4xf32>) -> tensor<2x4xf32> loc("/relu/\C3\A9")
  return %1 : tensor<2x4xf32>
}
}
