// shoal-autodiff: the loss, the backward graph and the gradients' marks;
// shoal-optimizer: one in-place update per trained weight.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-autodiff="loss=mse" | FileCheck %s --check-prefix=AD
// RUN: shoal-opt %inputs/mlp.mlir --shoal-autodiff --shoal-optimizer="lr=0.01 weight-decay=0.1" | FileCheck %s --check-prefix=OPT
// RUN: shoal-opt %inputs/mlp.mlir --shoal-autodiff="frozen=fc1.*,fc3.weight" --shoal-optimizer="optimizer=sgd momentum=0.9" | FileCheck %s --check-prefix=SGD
// RUN: shoal-opt %inputs/gpt_block.mlir --shoal-autodiff --shoal-optimizer | FileCheck %s --check-prefix=BLOCK
// A training pipeline: every stage gets a backward and an update TaskGraph;
// 1F1B runs backward steps, updates run once at the last micro-batch.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pp2_1f1b.yaml" --shoal-autodiff --shoal-optimizer --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-pipeline | FileCheck %s --check-prefix=PP
// Data parallel: the gradients are summed over the replicas.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-autodiff --shoal-optimizer --shoal-form-taskgraphs=world-size=2 --shoal-propagate-sharding --shoal-partition | FileCheck %s --check-prefix=DP
// Errors.
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-autodiff="loss=hinge" 2>&1 | FileCheck %s --check-prefix=ELOSS
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-autodiff="output=logits" 2>&1 | FileCheck %s --check-prefix=EOUT
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-autodiff="frozen=*" 2>&1 | FileCheck %s --check-prefix=EFROZEN
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-autodiff="frozen=fc1.*,fc9.weight" 2>&1 | FileCheck %s --check-prefix=ENOMATCH
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-autodiff="labels=x" 2>&1 | FileCheck %s --check-prefix=ELABELS
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-optimizer 2>&1 | FileCheck %s --check-prefix=ENOAD
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-autodiff --shoal-optimizer="optimizer=lamb" 2>&1 | FileCheck %s --check-prefix=EOPT
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-autodiff --shoal-optimizer="lr=0" 2>&1 | FileCheck %s --check-prefix=ELR
// RUN: not shoal-opt %s --shoal-autodiff 2>&1 | FileCheck %s --check-prefix=ERULE

// The labels input, the mean squared error and its scalar as the only
// output; the seed is 1.
// AD: shoal.training = {labels = "labels", loss = "loss"}
// AD: func.func @main(%{{.*}}: tensor<8x32xf32> {shoal.name = "x"}, %[[L:.*]]: tensor<8x24xf32> {shoal.name = "labels"}) -> (tensor<f32> {shoal.name = "loss"})
// AD: %[[D:.*]] = shoal.sub %{{.*}}, %[[L]]
// AD: shoal.mul %[[D]], %[[D]]
// AD: shoal.reduce_sum {{.*}} {axes = array<i64: 0, 1>, keepdims = false}
// AD: shoal.constant {shoal.phase = "backward"} dense<1.000000e+00> : tensor<f32>
// The weight gradient of a Gemm with transB: dW = dY^T X, as a Gemm with
// transA; its bias: a sum over the batch.
// AD: shoal.gemm %{{.*}}, %{{.*}} {shoal.grad_of = ["fc3.weight"], shoal.phase = "backward", transA = true}
// AD: shoal.where {{.*}}shoal.phase = "backward"
// AD: shoal.reduce_sum {{.*}}{axes = array<i64: 0>, keepdims = false, shoal.grad_of = ["fc2.bias"], shoal.phase = "backward"}
// AD: shoal.gemm {{.*}}shoal.grad_of = ["fc1.weight"]

// OPT: shoal.training = {grad_bucket_mb = 2.500000e+01 : f64, labels = "labels", loss = "loss", optimizer = "adamw"}
// OPT: shoal.softmax_cross_entropy %{{.*}}, %{{.*}} :
// OPT: %[[M:.*]] = shoal.weight "adam.m/fc3.weight" {shoal.zero_init} : tensor<24x32xf32>
// OPT: %[[V:.*]] = shoal.weight "adam.v/fc3.weight" {shoal.zero_init} : tensor<24x32xf32>
// OPT: shoal.adamw %{{.*}}, %{{.*}}, %[[M]], %[[V]] {beta1 = 9.000000e-01 : f64, beta2 = {{.*}} : f64, clip_norm = 0.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, min_lr = 0.000000e+00 : f64, shoal.phase = "optimizer", total_steps = 0 : i64, warmup_steps = 0 : i64, weight_decay = 1.000000e-01 : f64}
// OPT-COUNT-4: shoal.adamw
// OPT-NOT: shoal.adamw

// Frozen weights get no update; their gradients are not built.
// SGD-NOT: grad_of = ["fc1
// SGD: shoal.weight "sgd.momentum/fc2.weight"
// SGD: shoal.sgd
// SGD: shoal.weight "sgd.momentum/fc2.bias"
// SGD: shoal.sgd
// SGD-NOT: shoal.sgd

// The transformer block: softmax, layer norm, GELU's erf, attention matmuls.
// BLOCK-DAG: shoal.softmax_grad
// BLOCK-DAG: shoal.layer_norm_grad
// BLOCK-DAG: shoal.layer_norm_scale_grad
// BLOCK-DAG: shoal.exp
// BLOCK: shoal.adamw

// PP: shoal.schedule = {{\[\[}}"F0:s0", "F1:s0", "B0:s0.bwd", "F2:s0", "B1:s0.bwd", "F3:s0", "B2:s0.bwd", "B3:s0.bwd", "F3:s0.opt"], ["F0:s1", "B0:s1.bwd", "F1:s1", "B1:s1.bwd", "F2:s1", "B2:s1.bwd", "F3:s1", "B3:s1.bwd", "F3:s1.opt"]]
// PP: shoal.task_graph "s0" replicate(1)
// PP: shoal.task_graph "s1" replicate(1)
// The gradient flows back from s1's backward to s0's over a send/recv.
// PP: shoal.task_graph "s1.bwd" replicate(1) {{.*}}shoal.phase = "backward"
// PP: shoal.send
// PP: shoal.task_graph "s0.bwd" replicate(1) {{.*}}shoal.phase = "backward"
// PP: shoal.recv
// Gradients accumulate over the micro-batches.
// PP: shoal.all_reduce %{{.*}} over ["mb"]
// PP: shoal.task_graph "s1.opt" replicate(1) {{.*}}shoal.phase = "optimizer"
// PP: shoal.adamw
// PP: shoal.task_graph "s0.opt"

// DP: shoal.task_graph "default" replicate(1) mesh <["dp", "tp"], [2, 1]>
// DP: shoal.gemm {{.*}}transA = true
// DP-NEXT: shoal.all_reduce %{{.*}} over ["dp"] : tensor<24x32xf32>
// DP: shoal.adamw {{.*}} : tensor<24x32xf32>, tensor<24x32xf32>, tensor<24x32xf32>, tensor<24x32xf32>

// ELOSS: unknown loss 'hinge' (expected cross_entropy or mse)
// EOUT: the loss reads output 'logits', but the graph's outputs are y
// EFROZEN: nothing to train: every weight is frozen or not a float tensor
// ENOMATCH: error: the frozen pattern 'fc9.weight' matches no initializer (they are named like 'fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias')
// ELABELS: the graph already has an input named 'x'
// ENOAD: shoal-optimizer needs a training graph; run shoal-autodiff first
// EOPT: unknown optimizer 'lamb' (expected adamw or sgd)
// ELR: optimizer option lr must be > 0, got 0
// ERULE: 'shoal.onnx (ONNX GatherElements)' has no gradient rule, but the loss depends on it through a trained weight

module attributes {shoal.source = "/models/gather_elements.onnx"} {
  func.func @main(%x: tensor<4x8xf32> {shoal.name = "x"}) -> (tensor<4x2xf32> {shoal.name = "y"}) {
    %w = shoal.weight "w" : tensor<8xf32>
    %a = shoal.mul %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %i = shoal.constant dense<[[0, 1], [2, 3], [4, 5], [6, 7]]> : tensor<4x2xi64>
    %v = shoal.onnx "GatherElements"(%a, %i) {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x2xi64>) -> tensor<4x2xf32>
    return %v : tensor<4x2xf32>
  }
}
