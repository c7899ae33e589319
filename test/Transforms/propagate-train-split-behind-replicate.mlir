// shoal-propagate-sharding in a training module: a split scope behind a
// replicate one on the same devices (the README's pattern: a replicate
// default before the blocks, no micro-batches). The replicate TaskGraph
// cuts the batch over its two devices (tp); the split one takes its input
// whole over tp, as a split TaskGraph does, and splits its weights
// (Megatron's column then row). It used to keep the replicate TaskGraph's
// layout, the batch split over tp, and so split no weight at all (every
// rank trained whole blocks; the report warned of replicated work).
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_replicate_then_split.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding | FileCheck %s

// CHECK: shoal.task_graph "default" replicate(2) {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["tp"], []]>]
// CHECK: shoal.task_graph "blocks" split(2) {{.*}}shoal.arg_shardings = [#shoal.sharding<{{\[}}[], []]>]
// CHECK: shoal.weight "fc1.weight" {shoal.sharding = [#shoal.sharding<{{\[}}["tp"], []]>]}
// CHECK: shoal.weight "fc2.weight" {shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"]]>]}
// The replicate TaskGraph after the blocks (the final norm and head of the
// README's pattern) slices the batch the blocks hand over whole over tp.
// CHECK: shoal.task_graph "default.1" replicate(2) {{.*}}shoal.arg_shardings = [#shoal.sharding<{{\[}}["tp"], []]>], shoal.in_shardings = [#shoal.sharding<{{\[}}[], []]>]

module attributes {shoal.training} {
  func.func @main(%x: tensor<8x32xf32> {shoal.name = "x"}) -> (tensor<8x32xf32> {shoal.name = "y"}) {
    %h0 = shoal.relu %x : (tensor<8x32xf32>) -> tensor<8x32xf32> loc("/pre/Relu")
    %w1 = shoal.weight "fc1.weight" : tensor<128x32xf32> loc("fc1.weight")
    %h = shoal.gemm %h0, %w1 {transB = true} : (tensor<8x32xf32>, tensor<128x32xf32>) -> tensor<8x128xf32> loc("/blk/fc1/Gemm")
    %g = shoal.erf %h : (tensor<8x128xf32>) -> tensor<8x128xf32> loc("/blk/act/Erf")
    %w2 = shoal.weight "fc2.weight" : tensor<32x128xf32> loc("fc2.weight")
    %o = shoal.gemm %g, %w2 {transB = true} : (tensor<8x128xf32>, tensor<32x128xf32>) -> tensor<8x32xf32> loc("/blk/fc2/Gemm")
    %p = shoal.relu %o : (tensor<8x32xf32>) -> tensor<8x32xf32> loc("/post/Relu")
    return %p : tensor<8x32xf32>
  }
}
