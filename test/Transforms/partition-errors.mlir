// More devices than the dimension a split would cut has rows (a device
// count that does not divide it gives uneven shards instead: uneven.mlir).
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_split200.yaml" 2>&1 | FileCheck %s
// An uneven split summed where no zero-padded weight is along it.
// RUN: not shoal-opt %s --shoal-partition 2>&1 | FileCheck %s --check-prefix=UNEVEN
// An op that mixes the samples of a batch, under micro-batches.
// RUN: not shoal-opt %inputs/batch_softmax.mlir --shoal-parallelize="spec=%inputs/spec_pipeline.yaml" 2>&1 | FileCheck %s --check-prefix=MIXES
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_split2.yaml world-size=32" 2>&1 | FileCheck %s --check-prefix=BATCH

// CHECK: split(200) of TaskGraph 'model': node '/fc1/Gemm' would split a dimension of size 128 of weight 'fc1.weight' over 200 devices, more devices than it has rows

// MIXES: "/sm/Softmax"): dimension 0 is split into micro-batches here but needed whole (as #shoal.sharding<{{\[\[}}], []]>); an op that mixes the samples of a batch cannot run on micro-batches

// UNEVEN: sums a dimension of size 10 split unevenly over 3 devices, but no operand along it is a weight (whose padding is zero)
func.func @main(%x: tensor<4x10xf32> {shoal.sharding = #shoal.sharding<[[], []]>}, %y: tensor<10x6xf32> {shoal.sharding = #shoal.sharding<[[], []]>}) -> tensor<4x6xf32> {
  %0 = shoal.task_graph "t" split(3) mesh <["dp", "tp"], [1, 3]>(%x, %y : tensor<4x10xf32>, tensor<10x6xf32>) -> tensor<4x6xf32> attributes {shoal.in_shardings = [#shoal.sharding<[[], ["tp"]]>, #shoal.sharding<[["tp"], []]>], shoal.arg_shardings = [#shoal.sharding<[[], ["tp"]]>, #shoal.sharding<[["tp"], []]>], shoal.sharding = [#shoal.sharding<[[], []]>]} {
  ^bb0(%a: tensor<4x10xf32>, %b: tensor<10x6xf32>):
    %m = shoal.matmul %a, %b {shoal.factor_sharding = [[], [], ["tp"]], shoal.sharding = [#shoal.sharding<[[], []]>]} : (tensor<4x10xf32>, tensor<10x6xf32>) -> tensor<4x6xf32>
    shoal.yield %m : tensor<4x6xf32>
  }
  return %0 : tensor<4x6xf32>
}
// BATCH: graph input 'x' has batch dimension 8, which cannot be split evenly into 16 parts (dp=16;
