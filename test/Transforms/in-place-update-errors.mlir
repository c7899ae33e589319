// In-place updates keep their state with their weight (issue 49): an
// update whose weight or state is not the stored weight itself (a
// collective's result, a copy, a TaskGraph's input) would write a
// temporary, and a state laid out unlike its weight would be resharded
// into one; both are refused, naming the op and the weight.
// RUN: shoal-opt %s -split-input-file -verify-diagnostics
// RUN: not shoal-opt %S/Inputs/in-place-state-layout.mlir --shoal-partition 2>&1 | FileCheck %s --check-prefix=PART

// PART: error: 'shoal.adamw' op updates weight 'b' in place, laid out as #shoal.sharding<{{\[\[}}]]>, but its state 'adam.m/b' (operand 2) is laid out as #shoal.sharding<{{\[\[}}"tp"]]>: resharding it would update a temporary copy and leave the stored state as it was

// The moments gathered into temporaries (what TP2 made of a shared layer's
// bias before the fix).
func.func @gathered_moments(%g: tensor<32xf32>) {
  %0 = shoal.task_graph "s" split(2) mesh <["dp", "tp"], [1, 2]>(%g : tensor<32xf32>) -> tensor<32xf32> {
  ^bb0(%ga: tensor<32xf32>):
    %b = shoal.weight "block.ln.bias" {shoal.global_shape = array<i64: 32>, shoal.sharding = [#shoal.sharding<[[]]>]} : tensor<32xf32>
    %m = shoal.weight "adam.m/block.ln.bias" {shoal.global_shape = array<i64: 32>, shoal.sharding = [#shoal.sharding<[["tp"]]>], shoal.zero_init} : tensor<16xf32>
    %v = shoal.weight "adam.v/block.ln.bias" {shoal.global_shape = array<i64: 32>, shoal.sharding = [#shoal.sharding<[["tp"]]>], shoal.zero_init} : tensor<16xf32>
    %mg = shoal.all_gather %m dim 0 over ["tp"] : (tensor<16xf32>) -> tensor<32xf32>
    %vg = shoal.all_gather %v dim 0 over ["tp"] : (tensor<16xf32>) -> tensor<32xf32>
    // expected-error @+1 {{'shoal.adamw' op updates weight 'block.ln.bias' in place, but its exp_avg (operand 2) is the result of 'shoal.all_gather', not the stored state weight: the update would write a temporary copy}}
    shoal.adamw %b, %ga, %mg, %vg {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, clip_norm = 0.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, min_lr = 0.000000e+00 : f64, total_steps = 0 : i64, warmup_steps = 0 : i64, weight_decay = 0.000000e+00 : f64} : tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
    shoal.yield %ga : tensor<32xf32>
  }
  return
}

// -----

// The weight itself gathered: the update would write the gathered copy.
func.func @gathered_weight(%g: tensor<32xf32>) {
  %0 = shoal.task_graph "s" split(2) mesh <["dp", "tp"], [1, 2]>(%g : tensor<32xf32>) -> tensor<32xf32> {
  ^bb0(%ga: tensor<32xf32>):
    %w = shoal.weight "w" {shoal.global_shape = array<i64: 32>, shoal.sharding = [#shoal.sharding<[["tp"]]>]} : tensor<16xf32>
    %wg = shoal.all_gather %w dim 0 over ["tp"] : (tensor<16xf32>) -> tensor<32xf32>
    %buf = shoal.weight "sgd.momentum/w" {shoal.zero_init} : tensor<32xf32>
    // expected-error @+1 {{'shoal.sgd' op updates its operand 0 in place, but its weight (operand 0) is the result of 'shoal.all_gather', not the stored weight: the update would write a temporary copy}}
    shoal.sgd %wg, %ga, %buf {lr = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, weight_decay = 0.000000e+00 : f64, clip_norm = 0.000000e+00 : f64, warmup_steps = 0 : i64, total_steps = 0 : i64, min_lr = 0.000000e+00 : f64} : tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
    shoal.yield %ga : tensor<32xf32>
  }
  return
}

// -----

// A TaskGraph's input is no stored weight either.
func.func @input_state(%g: tensor<8xf32>, %s: tensor<8xf32>) {
  %0 = shoal.task_graph "s" replicate(1) mesh <["dp", "tp"], [1, 1]>(%g, %s : tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%ga: tensor<8xf32>, %sa: tensor<8xf32>):
    %w = shoal.weight "w" : tensor<8xf32>
    // expected-error @+1 {{'shoal.sgd' op updates weight 'w' in place, but its momentum_buffer (operand 2) is an input of its TaskGraph, not the stored state weight}}
    shoal.sgd %w, %ga, %sa {lr = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, weight_decay = 0.000000e+00 : f64, clip_norm = 0.000000e+00 : f64, warmup_steps = 0 : i64, total_steps = 0 : i64, min_lr = 0.000000e+00 : f64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
    shoal.yield %ga : tensor<8xf32>
  }
  return
}

// -----

// An assign writes its weight, not a copy of it.
func.func @assign_copy(%x: tensor<8xf32>) {
  %w = shoal.weight "bn.running_mean" : tensor<8xf32>
  %c = shoal.add %w, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  // expected-error @+1 {{'shoal.assign' op updates its operand 0 in place, but its weight (operand 0) is the result of 'shoal.add', not the stored weight}}
  shoal.assign %c, %x : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

// The state is stored as its weight is.
func.func @state_layout(%g: tensor<32xf32>) {
  %0 = shoal.task_graph "s" split(2) mesh <["dp", "tp"], [1, 2]>(%g : tensor<32xf32>) -> tensor<32xf32> {
  ^bb0(%ga: tensor<32xf32>):
    %b = shoal.weight "b" {shoal.sharding = [#shoal.sharding<[[]]>]} : tensor<32xf32>
    %m = shoal.weight "adam.m/b" {shoal.sharding = [#shoal.sharding<[[]]>], shoal.zero_init} : tensor<32xf32>
    %v = shoal.weight "adam.v/b" {shoal.sharding = [#shoal.sharding<[["tp"]]>], shoal.zero_init} : tensor<32xf32>
    // expected-error @+1 {{'shoal.adamw' op updates weight 'b' in place, but its exp_avg_sq 'adam.v/b' is laid out as [#shoal.sharding<[["tp"]]>] and the weight as [#shoal.sharding<[[]]>]: a weight's optimizer state must have the weight's layout}}
    shoal.adamw %b, %ga, %m, %v {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, clip_norm = 0.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, min_lr = 0.000000e+00 : f64, total_steps = 0 : i64, warmup_steps = 0 : i64, weight_decay = 0.000000e+00 : f64} : tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
    shoal.yield %ga : tensor<32xf32>
  }
  return
}
