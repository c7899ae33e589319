// RUN: shoal-opt %s | shoal-opt | FileCheck %s
// RUN: shoal-opt %s --mlir-print-op-generic | shoal-opt | FileCheck %s

// CHECK-LABEL: func.func @graph_ops
func.func @graph_ops(%x: tensor<4x8xf32>, %ids: tensor<4xi64>) -> tensor<4x8xf32> {
  // CHECK: shoal.weight "w" : tensor<8x8xf32>
  %w = shoal.weight "w" : tensor<8x8xf32>
  // CHECK: shoal.constant dense<5.000000e-01> : tensor<f32>
  %c = shoal.constant dense<0.5> : tensor<f32>
  // CHECK: shoal.matmul %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %0 = shoal.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.gemm %{{.*}}, %{{.*}} {alpha = 2.000000e+00 : f32, transB = true}
  %1 = shoal.gemm %0, %w {alpha = 2.0 : f32, transB = true} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.add
  %2 = shoal.add %1, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = shoal.sub %2, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = shoal.mul %3, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = shoal.div %4, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %6 = shoal.pow %5, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  // CHECK: shoal.erf
  %7 = shoal.erf %6 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %8 = shoal.tanh %7 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %9 = shoal.relu %8 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %10 = shoal.sqrt %9 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %11 = shoal.exp %10 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %12 = shoal.neg %11 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %13 = shoal.sigmoid %12 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.softmax %{{.*}} {axis = 0 : i64}
  %14 = shoal.softmax %13 {axis = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %g = shoal.weight "g" : tensor<8xf32>
  // CHECK: shoal.layer_norm %{{.*}}, %{{.*}} {epsilon = 9.99999997E-7 : f32}
  %15 = shoal.layer_norm %14, %g {epsilon = 1.0e-6 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.layer_norm %{{.*}}, %{{.*}} {epsilon = 9.99999997E-7 : f32, rms = true}
  %rms = shoal.layer_norm %14, %g {epsilon = 1.0e-6 : f32, rms = true} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.gather %{{.*}}, %{{.*}} : (tensor<8x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
  %16 = shoal.gather %w, %ids : (tensor<8x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
  // CHECK: shoal.reshape %{{.*}} : (tensor<4x8xf32>) -> tensor<2x16xf32>
  %17 = shoal.reshape %16 : (tensor<4x8xf32>) -> tensor<2x16xf32>
  // CHECK: shoal.transpose %{{.*}} {perm = array<i64: 1, 0>} : (tensor<2x16xf32>) -> tensor<16x2xf32>
  %18 = shoal.transpose %17 {perm = array<i64: 1, 0>} : (tensor<2x16xf32>) -> tensor<16x2xf32>
  // CHECK: shoal.reduce_mean %{{.*}} {axes = array<i64: -1>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %19 = shoal.reduce_mean %15 {axes = array<i64: -1>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  // CHECK: shoal.reduce_sum %{{.*}} {axes = array<i64: 0>, keepdims = false} : (tensor<4x8xf32>) -> tensor<8xf32>
  %20 = shoal.reduce_sum %15 {axes = array<i64: 0>, keepdims = false} : (tensor<4x8xf32>) -> tensor<8xf32>
  // CHECK: shoal.gelu %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %21 = shoal.gelu %15, %g : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.gelu %{{.*}} {approximate = "tanh"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %gt = shoal.gelu %15 {approximate = "tanh"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.gelu_grad %{{.*}}, %{{.*}}, %{{.*}} {approximate = "tanh"} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %gg = shoal.gelu_grad %gt, %15, %g {approximate = "tanh"} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.add_layer_norm %{{.*}}, %{{.*}}, %{{.*}} {axis = 1 : i64}
  %22:2 = shoal.add_layer_norm %21, %15, %g {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  // CHECK: shoal.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f32} : (tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %kt = shoal.transpose %15 {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %23 = shoal.attention %15, %kt, %15 {scale = 0.125 : f32} : (tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %15 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @parallel
// CHECK: shoal.task_graph "blocks" split(2) mesh <["dp", "tp"], [2, 2]>(%{{.*}} : tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK: shoal.all_reduce %{{.*}} over ["tp"] : tensor<4x8xf32>
// CHECK: shoal.all_gather %{{.*}} dim 1 over ["tp"] : (tensor<4x4xf32>) -> tensor<4x8xf32>
// CHECK: shoal.local_slice %{{.*}} dim 0 over ["dp", "tp"] : (tensor<4x8xf32>) -> tensor<1x8xf32>
// CHECK: shoal.yield
func.func @parallel(%x: tensor<4x8xf32> {shoal.sharding = #shoal.sharding<[["dp"], []]>}) -> tensor<4x8xf32> {
  %r = shoal.task_graph "blocks" split(2) mesh #shoal.mesh<["dp", "tp"], [2, 2]> (%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %0 = shoal.all_reduce %a over ["tp"] : tensor<4x8xf32>
    %s = shoal.local_slice %0 dim 1 over ["tp"] : (tensor<4x8xf32>) -> tensor<4x4xf32>
    %1 = shoal.all_gather %s dim 1 over ["tp"] : (tensor<4x4xf32>) -> tensor<4x8xf32>
    %2 = shoal.local_slice %1 dim 0 over ["dp", "tp"] : (tensor<4x8xf32>) -> tensor<1x8xf32>
    shoal.yield %1 : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// Pipeline stages and expert parallelism.
// CHECK-LABEL: func.func @stages
// CHECK: shoal.all_to_all %{{.*}} split 0 concat 1 over ["tp"] : (tensor<4x8x16xf32>) -> tensor<2x16x16xf32>
// CHECK: %[[B:.*]] = shoal.bridge %{{.*}} from <mesh = <["mb", "dp", "tp"], [2, 1, 1]>, sharding = <{{\[\[}}"mb"], []]>, offset = 0, stride = 3> to <mesh = <["mb", "dp", "tp"], [2, 1, 2]>, sharding = <{{\[\[}}"mb"], []]>, offset = 1, stride = 3> : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: shoal.send %{{.*}} id 3 from <{{.*}}> to <{{.*}}> : tensor<8x16xf32>
// CHECK: shoal.recv id 3 from <{{.*}}> to <{{.*}}> : tensor<8x16xf32>
func.func @stages(%e: tensor<4x8x16xf32>, %x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %t = shoal.all_to_all %e split 0 concat 1 over ["tp"] : (tensor<4x8x16xf32>) -> tensor<2x16x16xf32>
  %b = shoal.bridge %x from <mesh = #shoal.mesh<["mb", "dp", "tp"], [2, 1, 1]>, sharding = #shoal.sharding<[["mb"], []]>, offset = 0, stride = 3> to <mesh = #shoal.mesh<["mb", "dp", "tp"], [2, 1, 2]>, sharding = #shoal.sharding<[["mb"], []]>, offset = 1, stride = 3> : (tensor<8x16xf32>) -> tensor<8x16xf32>
  shoal.send %b id 3 from <mesh = #shoal.mesh<["dp", "tp"], [1, 1]>, sharding = #shoal.sharding<[[], []]>, offset = 0, stride = 2> to <mesh = #shoal.mesh<["dp", "tp"], [1, 1]>, sharding = #shoal.sharding<[[], []]>, offset = 1, stride = 2> : tensor<8x16xf32>
  %r = shoal.recv id 3 from <mesh = #shoal.mesh<["dp", "tp"], [1, 1]>, sharding = #shoal.sharding<[[], []]>, offset = 0, stride = 2> to <mesh = #shoal.mesh<["dp", "tp"], [1, 1]>, sharding = #shoal.sharding<[[], []]>, offset = 1, stride = 2> : tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}

// A strided split (outer runs of a minor factor) prints its outer counts.
// CHECK-LABEL: func.func @strided
// CHECK-SAME: #shoal.sharding<{{\[}}["dp"], []], outer = [3, 1]>
func.func @strided(%x: tensor<12x8xf32> {shoal.sharding = #shoal.sharding<[["dp"], []], outer = [3, 1]>}) -> tensor<12x8xf32> {
  return %x : tensor<12x8xf32>
}

// Vocabulary-parallel ops (made by shoal-partition).
// CHECK-LABEL: func.func @vocab
// CHECK: shoal.gather %{{.*}}, %{{.*}} {shard_axes = ["tp"], shard_size = 33 : i64}
// CHECK: shoal.all_reduce %{{.*}} over ["tp"] {reduction = "max"} : tensor<2x4xf32>
// CHECK: shoal.vocab_stats
// CHECK: shoal.vocab_cross_entropy
// CHECK: shoal.vocab_cross_entropy_grad
// CHECK: shoal.gather_grad %{{.*}}, %{{.*}} {shard_axes = ["tp"], shard_size = 33 : i64}
func.func @vocab(%t: tensor<17x8xf32>, %ids: tensor<2x4xi64>, %l: tensor<2x4x17xf32>, %d: tensor<2x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4x17xf32>, tensor<17x8xf32>) {
  %e = shoal.gather %t, %ids {shard_axes = ["tp"], shard_size = 33 : i64} : (tensor<17x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %lm = shoal.vocab_max %l {shard_axes = ["tp"], shard_size = 33 : i64} : (tensor<2x4x17xf32>) -> tensor<2x4xf32>
  %m = shoal.all_reduce %lm over ["tp"] {reduction = "max"} : tensor<2x4xf32>
  %s = shoal.vocab_stats %l, %ids, %m {shard_axes = ["tp"], shard_size = 33 : i64} : (tensor<2x4x17xf32>, tensor<2x4xi64>, tensor<2x4xf32>) -> tensor<2x4x2xf32>
  %loss = shoal.vocab_cross_entropy %m, %s, %ids : (tensor<2x4xf32>, tensor<2x4x2xf32>, tensor<2x4xi64>) -> tensor<2x4xf32>
  %g = shoal.vocab_cross_entropy_grad %l, %ids, %d, %m, %s {shard_axes = ["tp"], shard_size = 33 : i64} : (tensor<2x4x17xf32>, tensor<2x4xi64>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4x2xf32>) -> tensor<2x4x17xf32>
  %gt = shoal.gather_grad %ids, %e {shard_axes = ["tp"], shard_size = 33 : i64} : (tensor<2x4xi64>, tensor<2x4x8xf32>) -> tensor<17x8xf32>
  return %e, %loss, %g, %gt : tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4x17xf32>, tensor<17x8xf32>
}
