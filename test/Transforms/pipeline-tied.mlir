// Training in a pipeline with ops in no scope and a weight two stages read
// (tied input and output embeddings, as GPT-2 and T5 have).
// shoal-autodiff puts each op of no scope in the stage shoal-form-task-graphs
// gives it (the embedding's Gather, which reads only a graph input, in the
// stage of its first reader; the final norm in the stage it reads from), so
// that its backward and its weight's update run there too.
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_pp2_tied.yaml" --shoal-autodiff="loss=mse" | FileCheck %s --check-prefix=AD
// shoal-optimizer: each stage reading the tied weight updates its own copy
// with the summed gradient; the later stage's update is a mirror.
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_pp2_tied.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer | FileCheck %s --check-prefix=OPT
// shoal-pipeline: s1's part of the tied weight's gradient goes to s0 once,
// at the last micro-batch, and the summed gradient to s1's update TaskGraph
// once too.
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_pp2_tied.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-pipeline | FileCheck %s --check-prefix=PP

// AD: shoal.gather {{.*}}{shoal.scope = "s0"}
// AD: shoal.weight "norm.weight"
// AD-NEXT: shoal.mul %{{.*}}, %{{.*}} {shoal.scope = "s0"}
// The backward of the final norm's Mul (its weight's gradient) is s0's.
// AD: shoal.reduce_sum {{.*}}shoal.grad_of = ["norm.weight"], shoal.phase = "backward", shoal.scope = "s0"

// OPT: shoal.adamw %{{.*}} {{{.*}}shoal.phase = "optimizer", shoal.scope = "s0"{{.*}}} : tensor<8xf32>
// OPT-DAG: shoal.adamw %{{.*}} {{{.*}}shoal.phase = "optimizer", shoal.scope = "s0"{{.*}}} : tensor<10x8xf32>
// OPT-DAG: shoal.adamw %{{.*}} {{{.*}}shoal.mirror, shoal.phase = "optimizer", shoal.scope = "s1"{{.*}}} : tensor<10x8xf32>

// The activation gradient goes upstream right after it is computed, before
// the rest of the TaskGraph (the tied weight's transpose and its send): the
// stage upstream does not wait for this one's later work.
// PP: shoal.task_graph "s1.bwd"
// PP: %[[DX:.*]] = shoal.mul %{{[0-9]+}}, %{{[0-9]+}} {shoal.phase = "backward"} : (tensor<2x6x8xf32>, tensor<2x6x8xf32>) -> tensor<2x6x8xf32>
// PP-NEXT: shoal.send %[[DX]] id 1
// The LM head's gradient, summed over the micro-batches, goes to s0 once
// per step (at the last micro-batch), not at every micro-batch: s0 adds it
// to the embedding's sum only then.
// PP-NEXT: %[[T:.*]] = shoal.transpose
// PP-NEXT: shoal.send %[[T]] id [[TIED:[0-9]+]] {{.*}}shoal.last_micro_batch{{.*}} : tensor<10x8xf32>
// PP: shoal.task_graph "s0.bwd"
// PP: %[[R:.*]] = shoal.recv id [[TIED]] {{.*}}shoal.last_micro_batch{{.*}} : tensor<10x8xf32>
// PP: %[[S:.*]] = shoal.all_reduce %{{.*}} over ["mb"] : tensor<10x8xf32>
// PP-NEXT: %[[SUM:.*]] = shoal.add %[[R]], %[[S]]
// PP-NEXT: shoal.send %[[SUM]] id [[ID:[0-9]+]] {{.*}}shoal.last_micro_batch{{.*}} : tensor<10x8xf32>
// PP: shoal.task_graph "s1.opt"
// PP: shoal.recv id [[ID]] {{.*}} : tensor<10x8xf32>
// PP: shoal.adamw {{.*}}shoal.mirror

module {
  func.func @main(%ids: tensor<4x6xi64> {shoal.name = "ids"}) -> (tensor<4x6x10xf32> {shoal.name = "y"}) {
    %emb = shoal.weight "emb" : tensor<10x8xf32> loc("emb")
    %e = shoal.gather %emb, %ids {axis = 0 : i64} : (tensor<10x8xf32>, tensor<4x6xi64>) -> tensor<4x6x8xf32> loc("/embed/Gather")
    %h = shoal.tanh %e : (tensor<4x6x8xf32>) -> tensor<4x6x8xf32> loc("/s0/Tanh")
    %g = shoal.weight "norm.weight" : tensor<8xf32> loc("norm.weight")
    %n = shoal.mul %h, %g : (tensor<4x6x8xf32>, tensor<8xf32>) -> tensor<4x6x8xf32> loc("/final_norm/Mul")
    %t = shoal.transpose %emb {perm = array<i64: 1, 0>} : (tensor<10x8xf32>) -> tensor<8x10xf32> loc("/s1/Transpose")
    %r = shoal.tanh %n : (tensor<4x6x8xf32>) -> tensor<4x6x8xf32> loc("/s1/Tanh")
    %y = shoal.matmul %r, %t : (tensor<4x6x8xf32>, tensor<8x10xf32>) -> tensor<4x6x10xf32> loc("/s1/MatMul")
    return %y : tensor<4x6x10xf32>
  }
}
