// RUN: shoal-opt %s -split-input-file --shoal-report -o /dev/null | FileCheck %s
// RUN: shoal-opt %s -split-input-file --shoal-report="format=dot" -o /dev/null | FileCheck %s --check-prefix=DOT
// RUN: shoal-opt %s -split-input-file --shoal-report="file=%t.txt" -o /dev/null
// RUN: FileCheck %s --check-prefix=FILE < %t.txt

// Collectives in a split TaskGraph (DP2 x TP2). A collective's reason is
// its `shoal.reason` when shoal-partition wrote one, else derived from the
// ops around it.

// CHECK-LABEL: shoal parallelism report: 1 TaskGraph on 4 ranks
// CHECK: TaskGraph "blk": split(2), mesh dp=2 x tp=2, ranks 0-3
// CHECK-NEXT: inputs: graph input 'x'
// CHECK-NEXT: all_gather dim 1 over tp at /blk/Softmax: needed whole by 'shoal.softmax' at /blk/Softmax
// CHECK-NEXT: 2x8xf32 -> 2x16xf32, 128 B per rank
// CHECK-NEXT: all_reduce over tp at /blk/fc2/MatMul: partial sums of a contraction split over tp
// CHECK-NEXT: 2x16xf32, 128 B per rank
// CHECK-NEXT: local_slice dim 1 over tp at /blk/Add: 'shoal.add' takes it split over tp on dim 1
// CHECK-NEXT: 2x16xf32 -> 2x8xf32, no communication
// CHECK-NEXT: all_to_all split 0 concat 1 over tp at /blk/Relu: 'shoal.relu' takes it split over tp on dim 0, not 1
// CHECK-NEXT: 2x8xf32 -> 1x16xf32, 64 B per rank
// CHECK-NEXT: all_gather dim 0 over tp at /blk/Relu: output 0 of the TaskGraph is whole over tp
// CHECK-NEXT: 1x16xf32 -> 2x16xf32, 128 B per rank
// CHECK-NEXT: summary: 1 all_reduce (128 B), 2 all_gather (256 B), 1 all_to_all (64 B), 1 local_slice; 448 B per rank
// CHECK-NOT: warning
// CHECK: total: 1 all_reduce, 2 all_gather, 1 all_to_all, 1 local_slice; 0 warnings

// DOT-LABEL: digraph shoal {
// DOT: in0 [shape=ellipse, label="x\n2x8xf32"];
// DOT: out0 [shape=ellipse, label="y\n2x16xf32"];
// DOT: subgraph cluster_0 {
// DOT-NEXT: label="ranks 0-3";
// DOT: tg0 [label="blk\nsplit(2)\nmesh dp=2 x tp=2\nranks 0-3\n1 all_reduce (128 B)\n2 all_gather (256 B)\n1 all_to_all (64 B)\n1 local_slice"];
// DOT: in0 -> tg0;
// DOT: tg0 -> out0;
// DOT: }


func.func @main(%x: tensor<2x8xf32> {shoal.name = "x", shoal.sharding = #shoal.sharding<[["dp"], []]>}) -> (tensor<2x16xf32> {shoal.name = "y"}) {
  %0 = shoal.task_graph "blk" split(2) mesh <["dp", "tp"], [2, 2]>(%x : tensor<2x8xf32>) -> tensor<2x16xf32> {
  ^bb0(%a: tensor<2x8xf32>):
    %w1 = shoal.weight "w1" {shoal.sharding = [#shoal.sharding<[[], ["tp"]]>]} : tensor<8x8xf32> loc("w1")
    %h = shoal.matmul %a, %w1 : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32> loc("/blk/fc1/MatMul")
    %g = shoal.all_gather %h dim 1 over ["tp"] {shoal.reason = "needed whole by 'shoal.softmax' at /blk/Softmax"} : (tensor<2x8xf32>) -> tensor<2x16xf32> loc("/blk/Softmax")
    %s = shoal.softmax %g : (tensor<2x16xf32>) -> tensor<2x16xf32> loc("/blk/Softmax")
    %w2 = shoal.weight "w2" {shoal.sharding = [#shoal.sharding<[["tp"], []]>]} : tensor<8x16xf32> loc("w2")
    %p = shoal.matmul %h, %w2 : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32> loc("/blk/fc2/MatMul")
    %r = shoal.all_reduce %p over ["tp"] : tensor<2x16xf32> loc("/blk/fc2/MatMul")
    %l = shoal.local_slice %r dim 1 over ["tp"] : (tensor<2x16xf32>) -> tensor<2x8xf32> loc("/blk/Add")
    %sum = shoal.add %l, %h : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32> loc("/blk/Add")
    %e = shoal.all_to_all %sum split 0 concat 1 over ["tp"] : (tensor<2x8xf32>) -> tensor<1x16xf32> loc("/blk/Relu")
    %y = shoal.relu %e : (tensor<1x16xf32>) -> tensor<1x16xf32> loc("/blk/Relu")
    %o = shoal.all_gather %y dim 0 over ["tp"] : (tensor<1x16xf32>) -> tensor<2x16xf32> loc("blk")
    shoal.yield %o : tensor<2x16xf32>
  } loc("blk")
  return %0 : tensor<2x16xf32>
}

// -----

// Replicated work. "gather" gathers the batch (split over tp in a
// replicate scope, which the report calls dp: a replicate scope is data
// parallel over all its devices) for /g/MatMul; "whole" reads the whole batch and
// computes on it on both devices; "nosplit" is split(2) but splits no
// weight over tp.

// CHECK-LABEL: shoal parallelism report: 3 TaskGraphs on 2 ranks
// CHECK: TaskGraph "gather": replicate(2), mesh dp=2, ranks 0,1
// CHECK: all_gather dim 0 over dp at /g/MatMul: 'shoal.matmul' needs the batch whole over dp
// CHECK: warning: TaskGraph "gather": all_gather over dp at /g/MatMul gathers the batch: each rank computes the whole batch in 2 ops, /g/MatMul to /g/Relu (replicated work)
// CHECK-NOT: warning: TaskGraph "gather"
// CHECK: TaskGraph "whole": replicate(2), mesh dp=2, ranks 0,1
// CHECK-NEXT: inputs: "gather" output 0
// CHECK-NEXT: summary: no communication
// CHECK-NEXT: warning: TaskGraph "whole": each of its 2 devices computes the whole batch (4 on dim 0) in /w/Relu (replicated work)
// CHECK: TaskGraph "nosplit": split(2), mesh dp=1 x tp=2, ranks 0,1
// CHECK: warning: TaskGraph "nosplit": split(2) but no weight or input is split over tp: the 2 ranks of a tp group all compute /n/MatMul and the rest whole (replicated work)
// CHECK: total: 2 all_gather, 1 local_slice; 3 warnings

// DOT-LABEL: digraph shoal {
// DOT: tg0 [label="gather\nreplicate(2)\nmesh dp=2\nranks 0,1\n2 all_gather (256 B)\n1 local_slice\n1 warning", color=orange, penwidth=2];
// DOT: tg0 -> tg1 [label="4x8xf32"];
// DOT: tg1 -> tg2 [label="4x8xf32"];

func.func @main(%x: tensor<2x8xf32> {shoal.name = "x", shoal.sharding = #shoal.sharding<[["tp"], []]>}) -> tensor<4x8xf32> {
  %0 = shoal.task_graph "gather" replicate(2) mesh <["dp", "tp"], [1, 2]>(%x : tensor<2x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<2x8xf32>):
    %g = shoal.all_gather %a dim 0 over ["tp"] : (tensor<2x8xf32>) -> tensor<4x8xf32> loc("/g/MatMul")
    %w = shoal.weight "w" : tensor<8x8xf32> loc("w")
    %m = shoal.matmul %g, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> loc("/g/MatMul")
    %r = shoal.relu %m : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("/g/Relu")
    %l = shoal.local_slice %r dim 0 over ["tp"] : (tensor<4x8xf32>) -> tensor<2x8xf32> loc("/g/Add")
    %s = shoal.add %l, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32> loc("/g/Add")
    %o = shoal.all_gather %s dim 0 over ["tp"] : (tensor<2x8xf32>) -> tensor<4x8xf32> loc("gather")
    shoal.yield %o : tensor<4x8xf32>
  } loc("gather")
  %1 = shoal.task_graph "whole" replicate(2) mesh <["dp", "tp"], [1, 2]>(%0 : tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %r = shoal.relu %a : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("/w/Relu")
    shoal.yield %r : tensor<4x8xf32>
  } loc("whole")
  %2 = shoal.task_graph "nosplit" split(2) mesh <["dp", "tp"], [1, 2]>(%1 : tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %w = shoal.weight "v" {shoal.sharding = [#shoal.sharding<[[], []]>]} : tensor<8x8xf32> loc("v")
    %m = shoal.matmul %a, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> loc("/n/MatMul")
    shoal.yield %m : tensor<4x8xf32>
  } loc("nosplit")
  return %2 : tensor<4x8xf32>
}

// -----

// Two gathers of the batch whose whole-batch regions meet make one
// warning; in a split TaskGraph that splits some weights, a product whose
// weights are all whole is replicated work.

// CHECK-LABEL: shoal parallelism report: 2 TaskGraphs on 2 ranks
// CHECK: TaskGraph "two": replicate(2), mesh dp=2, ranks 0,1
// CHECK: warning: TaskGraph "two": 2 all_gathers over dp at /t/Add and /t/Add gather the batch: each rank computes the whole batch in 2 ops, /t/Add to /t/Relu (replicated work)
// CHECK-NOT: warning: TaskGraph "two"
// CHECK: TaskGraph "partly": split(2), mesh dp=1 x tp=2, ranks 0,1
// CHECK: warning: TaskGraph "partly": /p/fc2/MatMul splits no weight over tp: the 2 ranks of a tp group all compute it whole (replicated work)
// CHECK-NOT: warning: TaskGraph "partly"
// CHECK: total: 1 all_reduce, 2 all_gather, 2 local_slice; 2 warnings

// DOT-LABEL: digraph shoal {
// DOT: tg1 [label="partly\nsplit(2)\nmesh dp=1 x tp=2\nranks 0,1\n1 all_reduce (64 B)\n1 local_slice\n1 warning", color=orange, penwidth=2];
// DOT: in0 -> tg0;
// DOT: in1 -> tg0;

func.func @main(%x: tensor<2x8xf32> {shoal.name = "x", shoal.sharding = #shoal.sharding<[["tp"], []]>}, %y: tensor<2x8xf32> {shoal.name = "y", shoal.sharding = #shoal.sharding<[["tp"], []]>}) -> tensor<2x8xf32> {
  %0 = shoal.task_graph "two" replicate(2) mesh <["dp", "tp"], [1, 2]>(%x, %y : tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32> {
  ^bb0(%a: tensor<2x8xf32>, %b: tensor<2x8xf32>):
    %ga = shoal.all_gather %a dim 0 over ["tp"] : (tensor<2x8xf32>) -> tensor<4x8xf32> loc("/t/Add")
    %gb = shoal.all_gather %b dim 0 over ["tp"] : (tensor<2x8xf32>) -> tensor<4x8xf32> loc("/t/Add")
    %s = shoal.add %ga, %gb : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("/t/Add")
    %r = shoal.relu %s : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("/t/Relu")
    %l = shoal.local_slice %r dim 0 over ["tp"] : (tensor<4x8xf32>) -> tensor<2x8xf32> loc("two")
    shoal.yield %l : tensor<2x8xf32>
  } loc("two")
  %1 = shoal.task_graph "partly" split(2) mesh <["dp", "tp"], [1, 2]>(%0 : tensor<2x8xf32>) -> tensor<2x8xf32> {
  ^bb0(%a: tensor<2x8xf32>):
    %w1 = shoal.weight "w1" {shoal.sharding = [#shoal.sharding<[["tp"], []]>]} : tensor<4x8xf32> loc("w1")
    %l = shoal.local_slice %a dim 1 over ["tp"] : (tensor<2x8xf32>) -> tensor<2x4xf32> loc("/p/fc1/MatMul")
    %m = shoal.matmul %l, %w1 : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32> loc("/p/fc1/MatMul")
    %r = shoal.all_reduce %m over ["tp"] : tensor<2x8xf32> loc("/p/fc1/MatMul")
    %w2 = shoal.weight "w2" {shoal.sharding = [#shoal.sharding<[[], []]>]} : tensor<8x8xf32> loc("w2")
    %m2 = shoal.matmul %r, %w2 : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32> loc("/p/fc2/MatMul")
    shoal.yield %m2 : tensor<2x8xf32>
  } loc("partly")
  return %1 : tensor<2x8xf32>
}

// -----

// A pipeline after shoal-pipeline: a send/recv pair between stages.

// CHECK-LABEL: shoal parallelism report: 2 TaskGraphs on 3 ranks; pipeline of 2 stages, 2 micro-batches, gpipe schedule
// CHECK: TaskGraph "s0": replicate(1), stage 0, mesh mb=2 x dp=1, ranks 0
// CHECK: send 0 to "s1" at /s0/Relu: 2x8xf32, 64 B per rank, [mb, -] on ranks 0 -> [mb, -] on ranks 1,2
// CHECK-NEXT: summary: 1 send (64 B); 64 B per rank per micro-batch
// CHECK: TaskGraph "s1": split(2), stage 1, mesh mb=2 x dp=1 x tp=2, ranks 1,2
// CHECK-NEXT: recv 0 from "s0": 2x8xf32, 64 B per rank, [mb, -] on ranks 0 -> [mb, -] on ranks 1,2
// CHECK-NEXT: local_slice dim 1 over tp at /s1/MatMul: 'shoal.matmul' takes it split over tp on dim 1
// CHECK-NEXT: 2x8xf32 -> 2x4xf32, no communication
// CHECK-NEXT: all_reduce over tp at /s1/MatMul: partial sums of a contraction split over tp
// CHECK-NEXT: 2x8xf32, 64 B per rank
// CHECK-NEXT: summary: 1 all_reduce (64 B), 1 local_slice, 1 recv (64 B); 128 B per rank per micro-batch
// CHECK: total: 1 all_reduce, 1 local_slice, 1 send, 1 recv; 0 warnings

// DOT-LABEL: digraph shoal {
// DOT: subgraph cluster_0 {
// DOT-NEXT: label="ranks 0";
// DOT: subgraph cluster_1 {
// DOT-NEXT: label="ranks 1,2";
// DOT: tg0 -> tg1 [label="send/recv 0\n2x8xf32\n64 B per rank", style=bold];

module attributes {shoal.schedule_kind = "gpipe"} {
func.func @main(%x: tensor<2x8xf32> {shoal.name = "x", shoal.sharding = #shoal.sharding<[["mb"], []]>}) -> tensor<2x8xf32> {
  %0 = shoal.task_graph "s0" replicate(1) mesh <["mb", "dp", "tp"], [2, 1, 1]>(%x : tensor<2x8xf32>) -> tensor<2x8xf32> attributes {shoal.placement = array<i64: 0, 3>, shoal.stage = 0 : i64} {
  ^bb0(%a: tensor<2x8xf32>):
    %r = shoal.relu %a : (tensor<2x8xf32>) -> tensor<2x8xf32> loc("/s0/Relu")
    shoal.send %r id 0 from <mesh = <["mb", "dp", "tp"], [2, 1, 1]>, sharding = <[["mb"], []]>, offset = 0, stride = 3> to <mesh = <["mb", "dp", "tp"], [2, 1, 2]>, sharding = <[["mb"], []]>, offset = 1, stride = 3> : tensor<2x8xf32>
    shoal.yield %r : tensor<2x8xf32>
  }
  %1 = shoal.task_graph "s1" split(2) mesh <["mb", "dp", "tp"], [2, 1, 2]> -> tensor<2x8xf32> attributes {shoal.placement = array<i64: 1, 3>, shoal.stage = 1 : i64} {
    %a = shoal.recv id 0 from <mesh = <["mb", "dp", "tp"], [2, 1, 1]>, sharding = <[["mb"], []]>, offset = 0, stride = 3> to <mesh = <["mb", "dp", "tp"], [2, 1, 2]>, sharding = <[["mb"], []]>, offset = 1, stride = 3> : tensor<2x8xf32>
    %w = shoal.weight "w" {shoal.sharding = [#shoal.sharding<[["tp"], []]>]} : tensor<4x8xf32> loc("w")
    %l = shoal.local_slice %a dim 1 over ["tp"] : (tensor<2x8xf32>) -> tensor<2x4xf32> loc("/s1/MatMul")
    %m = shoal.matmul %l, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32> loc("/s1/MatMul")
    %r = shoal.all_reduce %m over ["tp"] : tensor<2x8xf32> loc("/s1/MatMul")
    shoal.yield %r : tensor<2x8xf32>
  }
  return %1 : tensor<2x8xf32>
}
}

// -----

// Before shoal-pipeline: a bridge between TaskGraphs on other ranks. "s1"
// gets its input whole and splits nothing.

// CHECK-LABEL: shoal parallelism report: 2 TaskGraphs on 3 ranks; pipeline of 2 stages, 1 micro-batch
// CHECK: TaskGraph "s0": replicate(1), stage 0, mesh dp=1, ranks 0
// CHECK-NEXT: inputs: graph input '#0'
// CHECK: TaskGraph "s1": split(2), stage 1, mesh dp=1 x tp=2, ranks 1,2
// CHECK-NEXT: inputs: a bridge
// CHECK-NEXT: summary: no communication
// CHECK-NEXT: warning: TaskGraph "s1": split(2) but no weight or input is split over tp: the 2 ranks of a tp group all compute /s1/Relu and the rest whole (replicated work)
// CHECK: bridges:
// CHECK-NEXT: bridge "s0" -> "s1": 4x8xf32 -> 4x8xf32, [-, -] on ranks 0 -> [-, -] on ranks 1,2
// CHECK: total: 1 bridge; 1 warning

// DOT-LABEL: digraph shoal {
// DOT: tg0 -> tg1 [label="bridge\n4x8xf32\n128 B per rank", style=dashed];

func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = shoal.task_graph "s0" replicate(1) mesh <["dp", "tp"], [1, 1]>(%x : tensor<4x8xf32>) -> tensor<4x8xf32> attributes {shoal.placement = array<i64: 0, 3>, shoal.stage = 0 : i64} {
  ^bb0(%a: tensor<4x8xf32>):
    %r = shoal.relu %a : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("/s0/Relu")
    shoal.yield %r : tensor<4x8xf32>
  }
  %b = shoal.bridge %0 from <mesh = <["dp", "tp"], [1, 1]>, sharding = <[[], []]>, offset = 0, stride = 3> to <mesh = <["dp", "tp"], [1, 2]>, sharding = <[[], []]>, offset = 1, stride = 3> : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = shoal.task_graph "s1" split(2) mesh <["dp", "tp"], [1, 2]>(%b : tensor<4x8xf32>) -> tensor<4x8xf32> attributes {shoal.placement = array<i64: 1, 3>, shoal.stage = 1 : i64} {
  ^bb0(%a: tensor<4x8xf32>):
    %r = shoal.relu %a : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("/s1/Relu")
    shoal.yield %r : tensor<4x8xf32>
  }
  return %1 : tensor<4x8xf32>
}

// -----

// Empty TaskGraphs (nothing but their yield) are left out.

// CHECK-LABEL: shoal parallelism report: 1 TaskGraph on 2 ranks
// CHECK-NOT: TaskGraph "default"
// CHECK: TaskGraph "model": replicate(2), mesh dp=2, ranks 0,1
// CHECK-NOT: TaskGraph "model.1"
// CHECK: total: no communication; 1 warning

func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  shoal.task_graph "default" replicate(1) mesh <["dp", "tp"], [1, 1]> {
    shoal.yield
  }
  %0 = shoal.task_graph "model" replicate(2) mesh <["dp", "tp"], [1, 2]>(%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %r = shoal.relu %a : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("/m/Relu")
    shoal.yield %r : tensor<4x8xf32>
  }
  shoal.task_graph "model.1" replicate(2) mesh <["dp", "tp"], [1, 2]> {
    shoal.yield
  }
  return %0 : tensor<4x8xf32>
}

// -----

// A weight read through a Transpose (an nn.Linear exported in training
// mode) counts as that product's weight: a split scope that splits some
// weights (here /b/up/MatMul's) but leaves /b/fc/MatMul's whole is warned
// about.

// CHECK-LABEL: shoal parallelism report: 1 TaskGraph on 2 ranks
// CHECK: warning: TaskGraph "b": /b/fc/MatMul splits no weight over tp: the 2 ranks of a tp group all compute it whole (replicated work)

func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = shoal.task_graph "b" split(2) mesh <["dp", "tp"], [1, 2]>(%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %u = shoal.weight "up.weight" {shoal.sharding = [#shoal.sharding<[[], ["tp"]]>]} : tensor<8x4xf32>
    %h = shoal.matmul %a, %u : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32> loc("/b/up/MatMul")
    %g = shoal.all_gather %h dim 1 over ["tp"] : (tensor<4x4xf32>) -> tensor<4x8xf32>
    %w = shoal.weight "fc.weight" {shoal.sharding = [#shoal.sharding<[[], []]>]} : tensor<8x8xf32>
    %t = shoal.transpose %w {perm = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %y = shoal.matmul %g, %t : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> loc("/b/fc/MatMul")
    shoal.yield %y : tensor<4x8xf32>
  }
  return %0 : tensor<4x8xf32>
}

// -----

// Each input chunk rewrites file=..., so it holds this last report.

// CHECK-LABEL: shoal parallelism report: 0 TaskGraphs on 0 ranks
// CHECK-NEXT: no TaskGraphs: run shoal-form-taskgraphs and shoal-partition first
// FILE: shoal parallelism report: 0 TaskGraphs on 0 ranks
// FILE-NEXT: no TaskGraphs: run shoal-form-taskgraphs and shoal-partition first

func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
