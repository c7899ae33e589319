// The plan export writes only the attributes include/shoal/Schema/Ops.def
// lists for each op kind, with its types: those the runtime's AttrReader
// takes. For the ops of the shoal dialect that holds when ExportPlan.cpp
// compiles (each name goes through PLAN_ATTR, a static_assert against
// Ops.def); an ONNX op's attributes come from the model and are checked as
// they are written: an attribute the runtime would refuse is an error at
// export, not when shoal-run loads the plan.
// RUN: shoal-opt %s --split-input-file --shoal-parallelize="world-size=1 fuse=false" | not shoal-translate --split-input-file --export-plan-text 2>&1 | FileCheck %s

// CHECK: error: attribute 'bogus' of op kind 'Concat' is not one include/shoal/Schema/Ops.def lists for that kind (shoal-run would refuse the plan)
func.func @main(%x: tensor<2x4xf32> {shoal.name = "x"}) -> (tensor<4x4xf32> {shoal.name = "y"}) {
  %0 = shoal.onnx "Concat"(%x, %x) {axis = 0 : i64, bogus = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

// CHECK: error: attribute 'axis' of op kind 'Concat' is not of type Int, which Ops.def gives it (shoal-run would refuse the plan)
func.func @main(%x: tensor<2x4xf32> {shoal.name = "x"}) -> (tensor<4x4xf32> {shoal.name = "y"}) {
  %0 = shoal.onnx "Concat"(%x, %x) {axis = "zero"} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

// CHECK: error: 'shoal.onnx' of kind 'Frobnicate' has no executable form in the plan (not an op kind of include/shoal/Schema/Ops.def)
func.func @main(%x: tensor<2x4xf32> {shoal.name = "x"}) -> (tensor<2x4xf32> {shoal.name = "y"}) {
  %0 = shoal.onnx "Frobnicate"(%x) {} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// An attribute Ops.def lists, of its type (a Float may be written as an
// integer: HardSigmoid's alpha), is written as it is.
// CHECK: kind: "Concat"
// CHECK: key: "axis"
// CHECK-NEXT: value {
// CHECK-NEXT: i: 0
// CHECK: kind: "HardSigmoid"
// CHECK: key: "alpha"
// CHECK-NEXT: value {
// CHECK-NEXT: i: 1
func.func @main(%x: tensor<2x4xf32> {shoal.name = "x"}) -> (tensor<4x4xf32> {shoal.name = "y"}) {
  %0 = shoal.onnx "Concat"(%x, %x) {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  %1 = shoal.onnx "HardSigmoid"(%0) {alpha = 1 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return %1 : tensor<4x4xf32>
}
