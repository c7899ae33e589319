// RUN: shoal-opt %s -split-input-file -verify-diagnostics

func.func @matmul_k(%a: tensor<4x8xf32>, %b: tensor<7x2xf32>) {
  // expected-error @+1 {{'shoal.matmul' op contracting dimensions differ: lhs [4, 8] has 8, rhs [7, 2] has 7}}
  %0 = shoal.matmul %a, %b : (tensor<4x8xf32>, tensor<7x2xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @matmul_result(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) {
  // expected-error @+1 {{'shoal.matmul' op result shape [4, 3] does not match the expected [4, 2]}}
  %0 = shoal.matmul %a, %b : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @broadcast(%a: tensor<4x8xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{'shoal.add' op operand shapes [4, 8] and [3] are not broadcast-compatible}}
  %0 = shoal.add %a, %b : (tensor<4x8xf32>, tensor<3xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @softmax_axis(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'shoal.softmax' op axis 2 out of range for rank 2}}
  %0 = shoal.softmax %a {axis = 2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @reshape_count(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'shoal.reshape' op cannot reshape [4, 8] (32 elements) to [5, 8] (40 elements)}}
  %0 = shoal.reshape %a : (tensor<4x8xf32>) -> tensor<5x8xf32>
  return
}

// -----

func.func @transpose_perm(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'shoal.transpose' op perm [0, 0] is not a permutation of rank 2}}
  %0 = shoal.transpose %a {perm = array<i64: 0, 0>} : (tensor<4x8xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @gather_indices(%a: tensor<4x8xf32>, %i: tensor<2xf32>) {
  // expected-error @+1 {{'shoal.gather' op indices must be i32 or i64, got 'f32'}}
  %0 = shoal.gather %a, %i : (tensor<4x8xf32>, tensor<2xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @all_gather_dim(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'shoal.all_gather' op gather dim 3 out of range for rank 2}}
  %0 = shoal.all_gather %a dim 3 over ["tp"] : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @local_slice_size(%a: tensor<4x8xf32>) {
  // A block of 3 of 8 is fine (uneven, zero-padded); a block of 9 is not.
  %ok = shoal.local_slice %a dim 1 over ["tp"] : (tensor<4x8xf32>) -> tensor<4x3xf32>
  // expected-error @+1 {{'shoal.local_slice' op slice dim 1 cannot grow from 8 to 9}}
  %0 = shoal.local_slice %a dim 1 over ["tp"] : (tensor<4x8xf32>) -> tensor<4x9xf32>
  return
}

// -----

func.func @all_reduce_axes(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'shoal.all_reduce' op needs at least one mesh axis}}
  %0 = shoal.all_reduce %a over [] : tensor<4x8xf32>
  return
}

// -----

func.func @weight_name() {
  // expected-error @+1 {{'shoal.weight' op needs the name of an initializer}}
  %0 = shoal.weight "" : tensor<4xf32>
  return
}

// -----

func.func @task_graph_yield(%x: tensor<4xf32>) {
  // expected-error @+1 {{'shoal.task_graph' op yields 1 values whose types differ from its 1 results}}
  %r = shoal.task_graph "t" replicate(1) (%x : tensor<4xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<4xf32>):
    shoal.yield %a : tensor<4xf32>
  }
  return
}

// -----

func.func @task_graph_devices(%x: tensor<4xf32>) {
  // expected-error @+1 {{'shoal.task_graph' op mesh axis 'tp' has size 4 but the TaskGraph has 2 devices}}
  %r = shoal.task_graph "t" split(2) mesh #shoal.mesh<["dp", "tp"], [1, 4]> (%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    shoal.yield %a : tensor<4xf32>
  }
  return
}

// -----

// expected-error @+1 {{mesh axis 'tp' appears twice}}
func.func @mesh_dup() attributes {m = #shoal.mesh<["tp", "tp"], [2, 2]>} {
  return
}

// -----

// expected-error @+1 {{sharding uses mesh axis 'tp' twice}}
func.func @sharding_dup() attributes {s = #shoal.sharding<[["tp"], ["tp"]]>} {
  return
}

// -----

// expected-error @+1 {{sharding: 'outer' has 1 entries for 2 dimensions}}
func.func @sharding_outer_count() attributes {s = #shoal.sharding<[["dp"], []], outer = [4]>} {
  return
}

// -----

// expected-error @+1 {{sharding: outer count of dimension 0 must be at least 1, got 0}}
func.func @sharding_outer_zero() attributes {s = #shoal.sharding<[["dp"], []], outer = [0, 1]>} {
  return
}

// -----

// expected-error @+1 {{sharding: dimension 1 is whole but has outer count 3}}
func.func @sharding_outer_whole() attributes {s = #shoal.sharding<[["dp"], []], outer = [1, 3]>} {
  return
}

// -----

// expected-error @+1 {{scope 'a' has device count 0; expected at least 1}}
func.func @scope_devices() attributes {s = #shoal.scope<"a", split, 0>} {
  return
}

// -----

func.func @scope_attr(%x: tensor<4xf32>) {
  // expected-error @+1 {{'shoal.scope' must be a string naming a scope}}
  %0 = shoal.relu %x {shoal.scope = 3 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @attention_keys(%q: tensor<2x5x4xf32>, %kt: tensor<2x4x6xf32>, %v: tensor<2x7x3xf32>) {
  // expected-error @+1 {{'shoal.attention' op kt has 6 keys but v has 7}}
  %0 = shoal.attention %q, %kt, %v {scale = 1.0 : f32} : (tensor<2x5x4xf32>, tensor<2x4x6xf32>, tensor<2x7x3xf32>) -> tensor<2x5x3xf32>
  return
}

// -----

func.func @attention_grad_dy(%dy: tensor<2x5x4xf32>, %q: tensor<2x5x4xf32>, %kt: tensor<2x4x6xf32>, %v: tensor<2x6x3xf32>) {
  // expected-error @+1 {{'shoal.attention_grad' op grad of shape [2, 5, 4] is not the attention's result shape [2, 5, 3]}}
  %dq, %dkt, %dv = shoal.attention_grad %dy, %q, %kt, %v {scale = 1.0 : f32} : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x4x6xf32>, tensor<2x6x3xf32>) -> (tensor<2x5x4xf32>, tensor<2x4x6xf32>, tensor<2x6x3xf32>)
  return
}

// -----

func.func @attention_grad_results(%dy: tensor<2x5x3xf32>, %q: tensor<2x5x4xf32>, %kt: tensor<2x4x6xf32>, %v: tensor<2x6x3xf32>) {
  // expected-error @+1 {{'shoal.attention_grad' op results must have the types of q, kt and v}}
  %dq, %dkt, %dv = shoal.attention_grad %dy, %q, %kt, %v {scale = 1.0 : f32} : (tensor<2x5x3xf32>, tensor<2x5x4xf32>, tensor<2x4x6xf32>, tensor<2x6x3xf32>) -> (tensor<2x5x4xf32>, tensor<2x6x4xf32>, tensor<2x6x3xf32>)
  return
}

// -----

func.func @attention_grad_keys(%dy: tensor<2x5x3xf32>, %q: tensor<2x5x4xf32>, %kt: tensor<2x4x6xf32>, %v: tensor<2x7x3xf32>) {
  // expected-error @+1 {{'shoal.attention_grad' op kt has 6 keys but v has 7}}
  %dq, %dkt, %dv = shoal.attention_grad %dy, %q, %kt, %v {scale = 1.0 : f32} : (tensor<2x5x3xf32>, tensor<2x5x4xf32>, tensor<2x4x6xf32>, tensor<2x7x3xf32>) -> (tensor<2x5x4xf32>, tensor<2x4x6xf32>, tensor<2x7x3xf32>)
  return
}

// -----

func.func @add_layer_norm_types(%a: tensor<4x8xf32>, %b: tensor<4x4xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{'shoal.add_layer_norm' op operands and results must all have type 'tensor<4x8xf32>'}}
  %s, %y = shoal.add_layer_norm %a, %b, %g : (tensor<4x8xf32>, tensor<4x4xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @all_to_all_same_dim(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'shoal.all_to_all' op split dim 0 and concat dim 0 must be two different dimensions of rank 2}}
  %0 = shoal.all_to_all %a split 0 concat 0 over ["tp"] : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @all_to_all_sizes(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'shoal.all_to_all' op split dim 0 must shrink by the factor concat dim 1 grows (4 -> 2, 8 -> 8)}}
  %0 = shoal.all_to_all %a split 0 concat 1 over ["tp"] : (tensor<4x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @bridge_rank(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'shoal.bridge' op layout sharding has 1 dimensions for a value of rank 2}}
  %0 = shoal.bridge %a from <mesh = #shoal.mesh<["dp", "tp"], [1, 1]>, sharding = #shoal.sharding<[[]]>, offset = 0, stride = 1> to <mesh = #shoal.mesh<["dp", "tp"], [1, 1]>, sharding = #shoal.sharding<[[], []]>, offset = 1, stride = 1> : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @placement() attributes {shoal.placement = array<i64: 0>} {
  // expected-error @-1 {{'shoal.placement' must be array<i64: offset, stride> with non-negative entries}}
  return
}

// -----

func.func @bridge_axis(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'shoal.bridge' op layout sharding uses mesh axis 'zz', which its mesh does not have}}
  %0 = shoal.bridge %a from <mesh = #shoal.mesh<["dp", "tp"], [1, 1]>, sharding = #shoal.sharding<[[], []]>, offset = 0, stride = 1> to <mesh = #shoal.mesh<["dp", "tp"], [1, 2]>, sharding = #shoal.sharding<[["zz"], []]>, offset = 1, stride = 2> : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @recv_rank() {
  // expected-error @+1 {{'shoal.recv' op layout sharding has 1 dimensions for a value of rank 2}}
  %0 = shoal.recv id 0 from <mesh = #shoal.mesh<["dp", "tp"], [1, 1]>, sharding = #shoal.sharding<[[], []]>, offset = 0, stride = 1> to <mesh = #shoal.mesh<["dp", "tp"], [1, 1]>, sharding = #shoal.sharding<[[]]>, offset = 1, stride = 1> : tensor<4x8xf32>
  return
}

// -----

func.func @weight_view_elements() -> tensor<8x3x4xf32> {
  // expected-error @+1 {{'shoal.weight' op weight 'w' views an initializer of shape [8, 24] as [8, 3, 4], which has another number of elements}}
  %w = shoal.weight "w" {shoal.source_shape = array<i64: 8, 24>} : tensor<8x3x4xf32>
  return %w : tensor<8x3x4xf32>
}

// -----

func.func @weight_block_outside() -> tensor<8x8xf32> {
  // expected-error @+1 {{'shoal.weight' op weight 'w[:, 12:20]' of shape [8, 8] is no block of initializer 'w' of shape [8, 16] starting at 12 along axis 1}}
  %w = shoal.weight "w[:, 12:20]" {shoal.source_range = {axis = 1 : i64, initializer = "w", shape = array<i64: 8, 16>, start = 12 : i64}} : tensor<8x8xf32>
  return %w : tensor<8x8xf32>
}

// -----

func.func @weight_block_other_dims() -> tensor<4x8xf32> {
  // expected-error @+1 {{'shoal.weight' op weight 'w[:, 0:8]' of shape [4, 8] is no block of initializer 'w' of shape [8, 16] starting at 0 along axis 1}}
  %w = shoal.weight "w[:, 0:8]" {shoal.source_range = {axis = 1 : i64, initializer = "w", shape = array<i64: 8, 16>, start = 0 : i64}} : tensor<4x8xf32>
  return %w : tensor<4x8xf32>
}

// -----

func.func @weight_block_fields() -> tensor<8x8xf32> {
  // expected-error @+1 {{'shoal.weight' op weight 'w[:, 0:8]': shoal.source_range needs initializer, shape, axis and start}}
  %w = shoal.weight "w[:, 0:8]" {shoal.source_range = {axis = 1 : i64, shape = array<i64: 8, 16>, start = 0 : i64}} : tensor<8x8xf32>
  return %w : tensor<8x8xf32>
}

// -----

func.func @assign_type_mismatch(%v: tensor<4xf32>) {
  %w = shoal.weight "bn.running_mean" : tensor<8xf32>
  // expected-error @+1 {{'shoal.assign' op every operand must have the weight's type 'tensor<8xf32>', got 'tensor<4xf32>'}}
  shoal.assign %w, %v : tensor<8xf32>, tensor<4xf32>
  return
}

// -----

func.func @all_reduce_min(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'shoal.all_reduce' op reduction must be "sum" or "max", not "min"}}
  %0 = shoal.all_reduce %a over ["tp"] {reduction = "min"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @vocab_gather_axis(%t: tensor<4x8xf32>, %i: tensor<2xi64>) -> tensor<4x2xf32> {
  // expected-error @+1 {{'shoal.gather' op a vocabulary-parallel gather must be along axis 0, not 1}}
  %0 = shoal.gather %t, %i {axis = 1 : i64, shard_axes = ["tp"], shard_size = 8 : i64} : (tensor<4x8xf32>, tensor<2xi64>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

func.func @vocab_gather_half(%t: tensor<4x8xf32>, %i: tensor<2xi64>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'shoal.gather' op needs both shard_axes and shard_size}}
  %0 = shoal.gather %t, %i {shard_size = 8 : i64} : (tensor<4x8xf32>, tensor<2xi64>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

func.func @vocab_block_too_big(%l: tensor<2x9xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'shoal.vocab_max' op a block of 9 cannot be a shard of 8}}
  %0 = shoal.vocab_max %l {shard_axes = ["tp"], shard_size = 8 : i64} : (tensor<2x9xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @vocab_stats_shape(%l: tensor<2x4xf32>, %y: tensor<2xi64>, %m: tensor<2xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'shoal.vocab_stats' op stats must be f32 [2, 2], got [2, 3]}}
  %0 = shoal.vocab_stats %l, %y, %m {shard_axes = ["tp"], shard_size = 8 : i64} : (tensor<2x4xf32>, tensor<2xi64>, tensor<2xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @vocab_grad_labels(%l: tensor<2x4xf32>, %y: tensor<3xi64>, %d: tensor<2xf32>, %m: tensor<2xf32>, %s: tensor<2x2xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{'shoal.vocab_cross_entropy_grad' op labels [3] must have the positions' shape [2]}}
  %0 = shoal.vocab_cross_entropy_grad %l, %y, %d, %m, %s {shard_axes = ["tp"], shard_size = 8 : i64} : (tensor<2x4xf32>, tensor<3xi64>, tensor<2xf32>, tensor<2xf32>, tensor<2x2xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @gelu_form(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'shoal.gelu' op approximate must be "none" or "tanh", got "sigmoid"}}
  %0 = shoal.gelu %x {approximate = "sigmoid"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @gelu_grad_type(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>) -> tensor<4x1xf32> {
  // expected-error @+1 {{'shoal.gelu_grad' op result type must equal the gradient's type}}
  %0 = shoal.gelu_grad %dy, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x1xf32>
  return %0 : tensor<4x1xf32>
}

// -----

func.func @gelu_grad_bias(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %b: tensor<7xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'shoal.gelu_grad' op operand shapes [4, 8] and [4, 8] and [7] are not broadcast-compatible}}
  %0 = shoal.gelu_grad %dy, %x, %b : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<7xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
