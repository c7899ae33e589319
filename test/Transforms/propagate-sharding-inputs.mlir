// RUN: shoal-opt %s -split-input-file --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding -verify-diagnostics | FileCheck %s

// The batch is dimension 0 of the first input; an input whose dimension 0 is
// something else (here a bias table) stays whole. A weight used twice by one
// op is cloned once.
// CHECK-LABEL: func.func @inputs
// CHECK-SAME: %arg0: tensor<4x3xf32> {shoal.sharding = #shoal.sharding<{{\[}}["dp"], []]>}
// CHECK-SAME: %arg1: tensor<3xf32> {shoal.sharding = #shoal.sharding<{{\[}}[]]>}
// CHECK: shoal.weight "w"
// CHECK-NOT: shoal.weight
// CHECK: shoal.mul
func.func @inputs(%x: tensor<4x3xf32>, %b: tensor<3xf32>) -> (tensor<4x3xf32>, tensor<3xf32>) {
  %0 = shoal.add %x, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %w = shoal.weight "w" : tensor<3xf32>
  %1 = shoal.mul %w, %w : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %0, %1 : tensor<4x3xf32>, tensor<3xf32>
}

// -----

// A sharding written on an input must fit the mesh.
// expected-error @+1 {{sharding of graph input 'x': dimension 0 uses mesh axis 'xx', which the mesh does not have}}
func.func @unknown_axis(%x: tensor<4x3xf32> {shoal.name = "x", shoal.sharding = #shoal.sharding<[["xx"], []]>}) -> tensor<4x3xf32> {
  %0 = shoal.relu %x : (tensor<4x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// expected-error @+1 {{sharding of graph input 'x': dimension 1 of size 3 cannot be split evenly over 2 ranks}}
func.func @indivisible(%x: tensor<4x3xf32> {shoal.name = "x", shoal.sharding = #shoal.sharding<[[], ["dp"]]>}) -> tensor<4x3xf32> {
  %0 = shoal.relu %x : (tensor<4x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// expected-error @+1 {{sharding of graph input 'x': it has 1 entries for a tensor of rank 2}}
func.func @rank(%x: tensor<4x3xf32> {shoal.name = "x", shoal.sharding = #shoal.sharding<[["dp"]]>}) -> tensor<4x3xf32> {
  %0 = shoal.relu %x : (tensor<4x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// A graph output that is a weight (no node computes it) is loaded by a
// TaskGraph of its own.
// CHECK-LABEL: func.func @output_is_weight
// CHECK: shoal.task_graph "default"
// CHECK: %[[W:.*]] = shoal.task_graph "outputs" replicate(1) {{.*}} -> tensor<4xf32>
// CHECK-NEXT: shoal.weight "w"
// CHECK: return %{{.*}}, %[[W]]
func.func @output_is_weight(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %w = shoal.weight "w" : tensor<4xf32>
  %0 = shoal.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  return %0, %w : tensor<4xf32>, tensor<4xf32>
}
