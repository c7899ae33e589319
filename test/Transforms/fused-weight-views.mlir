// shoal-fused-weight-views views a fused projection's weight (and bias) in
// pieces when the product is cut in equal pieces along its last dimension:
// GPT-2's c_attn (one Split into q, k, v) and nn.MultiheadAttention's
// in_proj (three Slices), also through reshapes that keep the last
// dimension (Hugging Face's Conv1D: the batch flattened for a Gemm with its
// bias, restored before the Split). A cut in unequal pieces is computed
// piece by piece, each with its block of the weight
// (fused-weight-blocks.mlir).
// Then, under split(2), shoal-propagate-sharding splits each piece by heads
// (the view's last part over tp: a strided split of the product with 3
// runs), the cut gives every piece a plain split, and nothing is gathered.
// RUN: shoal-opt %s --shoal-fused-weight-views | FileCheck %s
// RUN: shoal-opt %s --shoal-fused-weight-views --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding | FileCheck %s --check-prefix=PROP
// RUN: shoal-opt %s --shoal-fused-weight-views --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition | FileCheck %s --check-prefix=PART

// CHECK-LABEL: func.func @split
// CHECK: %[[W:.*]] = shoal.weight "c_attn.weight" {shoal.source_shape = array<i64: 8, 24>} : tensor<8x3x8xf32>
// CHECK: shoal.reshape %[[W]] : (tensor<8x3x8xf32>) -> tensor<8x24xf32>
// CHECK: %[[B:.*]] = shoal.weight "c_attn.bias" {shoal.source_shape = array<i64: 24>} : tensor<3x8xf32>
// CHECK: shoal.reshape %[[B]] : (tensor<3x8xf32>) -> tensor<24xf32>
// CHECK-LABEL: func.func @slices
// CHECK: shoal.weight "in_proj.weight" {shoal.source_shape = array<i64: 8, 24>} : tensor<8x3x8xf32>
// CHECK-LABEL: func.func @unequal
// CHECK: shoal.weight "qkv.weight[:, 0:8]" {shoal.source_range = {{.*}}} : tensor<8x8xf32>
// A reshape of the product into [.., 3, H, d] whose 3 pieces are taken one
// by one (swin's qkv, after a permute) cuts 3 pieces; one into [.., H, d]
// (a single projection's heads) cuts none, nor one into [.., H, 3, d]
// taken apart inside each head (BLOOM's: the heads are major already).
// CHECK-LABEL: func.func @reshape_pieces
// CHECK: shoal.weight "qkv.weight" {shoal.source_shape = array<i64: 8, 24>} : tensor<8x3x8xf32>
// CHECK: shoal.weight "q.weight" : tensor<8x8xf32>
// CHECK: shoal.weight "heads_qkv.weight" : tensor<8x24xf32>
// torch 2's nn.MultiheadAttention (dynamo export): in_proj's product
// reshaped to [.., 3, E], unsqueezed, permuted, squeezed, and each piece
// taken by an index: 3 pieces (once its tp2 plan all-gathered the product
// before the reshape). A reshape to [.., 3, E] that is not taken apart
// one by one (reduced over) cuts none.
// CHECK-LABEL: func.func @unflatten_pieces
// CHECK: shoal.weight "mha.in_proj_weight" {shoal.source_shape = array<i64: 8, 24>} : tensor<8x3x8xf32>
// CHECK: shoal.weight "mha.in_proj_bias" {shoal.source_shape = array<i64: 24>} : tensor<3x8xf32>
// CHECK: shoal.weight "other.weight" : tensor<8x24xf32>
// CHECK-LABEL: func.func @conv1d
// CHECK: shoal.weight "h.0.attn.c_attn.weight" {shoal.source_shape = array<i64: 8, 24>} : tensor<8x3x8xf32>
// CHECK: shoal.weight "h.0.attn.c_attn.bias" {shoal.source_shape = array<i64: 24>} : tensor<3x8xf32>

// The weight's view is split plainly on its last part; the product and the
// biased sum are strided (3 runs); each q/k/v piece is a plain split.
// PROP-LABEL: func.func @split
// PROP: shoal.weight "c_attn.weight" {shoal.sharding = [#shoal.sharding<{{\[}}[], [], ["tp"]]>], shoal.source_shape = array<i64: 8, 24>}
// PROP: shoal.reshape {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"]], outer = [1, 3]>]
// PROP: shoal.matmul {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}[], [], ["tp"]], outer = [1, 1, 3]>]
// PROP: shoal.add {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}[], [], ["tp"]], outer = [1, 1, 3]>]
// PROP: shoal.onnx "Split"{{.*}}shoal.sharding = [#shoal.sharding<{{\[}}[], [], ["tp"]]>, #shoal.sharding<{{\[}}[], [], ["tp"]]>, #shoal.sharding<{{\[}}[], [], ["tp"]]>]

// Each rank loads [8, 3, 4] (its half of q, k and v), reshapes it to
// [8, 12] and cuts its local product in pieces of 4.
// PART-LABEL: func.func @split
// PART-NOT: shoal.all_gather
// PART: shoal.weight "c_attn.weight" {{.*}} : tensor<8x3x4xf32>
// PART: shoal.reshape %{{.*}} : (tensor<8x3x4xf32>) -> tensor<8x12xf32>
// PART: shoal.matmul {{.*}} -> tensor<2x4x12xf32>
// PART: shoal.onnx "Split"(%{{.*}}) {axis = 2 : i64, split = array<i64: 4, 4, 4>} : (tensor<2x4x12xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>)
// PART-LABEL: func.func @slices
// PART-NOT: shoal.all_gather
// PART: shoal.onnx "Slice"(%{{.*}}) {axes = array<i64: -1>, ends = array<i64: 4>, starts = array<i64: 0>} : (tensor<2x4x12xf32>) -> tensor<2x4x4xf32>
// PART: shoal.onnx "Slice"(%{{.*}}) {axes = array<i64: -1>, ends = array<i64: 8>, starts = array<i64: 4>} : (tensor<2x4x12xf32>) -> tensor<2x4x4xf32>
// PART: shoal.onnx "Slice"(%{{.*}}) {axes = array<i64: -1>, ends = array<i64: 12>, starts = array<i64: 8>} : (tensor<2x4x12xf32>) -> tensor<2x4x4xf32>
// PART-LABEL: func.func @unequal
// Each rank's [8, 3, 4] block of in_proj, and q, k, v of its heads, with
// nothing gathered.
// PART-LABEL: func.func @unflatten_pieces
// PART-NOT: shoal.all_gather
// PART: shoal.weight "mha.in_proj_weight" {{.*}} : tensor<8x3x4xf32>
// PART: shoal.reshape {{.*}} -> tensor<4x2x3x4xf32>
// PART-COUNT-3: shoal.gather {{.*}} -> tensor<4x2x4xf32>
// The Conv1D: each rank's [8, 3, 4] block, its Gemm on the flattened batch
// and the Split of the restored one, with nothing gathered before (the
// function's results are gathered after the relus, as above).
// PART-LABEL: func.func @conv1d
// PART-NOT: shoal.all_gather
// PART: shoal.weight "h.0.attn.c_attn.weight" {{.*}} : tensor<8x3x4xf32>
// PART: shoal.gemm {{.*}} -> tensor<8x12xf32>
// PART: shoal.reshape {{.*}} : (tensor<8x12xf32>) -> tensor<2x4x12xf32>
// PART: shoal.onnx "Split"(%{{.*}}) {axis = 2 : i64, split = array<i64: 4, 4, 4>} : (tensor<2x4x12xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>)

module attributes {shoal.scopes = [#shoal.scope<"attn", split, 2>]} {
  func.func @split(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "q"}, tensor<2x4x8xf32> {shoal.name = "k"}, tensor<2x4x8xf32> {shoal.name = "v"}) {
    %w = shoal.weight "c_attn.weight" : tensor<8x24xf32>
    %b = shoal.weight "c_attn.bias" : tensor<24xf32>
    %p = shoal.matmul %x, %w {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x24xf32>) -> tensor<2x4x24xf32>
    %a = shoal.add %b, %p {shoal.scope = "attn"} : (tensor<24xf32>, tensor<2x4x24xf32>) -> tensor<2x4x24xf32>
    %q:3 = shoal.onnx "Split"(%a) {axis = 2 : i64, split = array<i64: 8, 8, 8>} {shoal.scope = "attn"} : (tensor<2x4x24xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
    %r0 = shoal.relu %q#0 {shoal.scope = "attn"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %r1 = shoal.relu %q#1 {shoal.scope = "attn"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %r2 = shoal.relu %q#2 {shoal.scope = "attn"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    return %r0, %r1, %r2 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  }
  func.func @slices(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "q"}, tensor<2x4x8xf32> {shoal.name = "k"}, tensor<2x4x8xf32> {shoal.name = "v"}) {
    %w = shoal.weight "in_proj.weight" : tensor<8x24xf32>
    %p = shoal.matmul %x, %w {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x24xf32>) -> tensor<2x4x24xf32>
    %q = shoal.onnx "Slice"(%p) {axes = array<i64: -1>, ends = array<i64: 8>, starts = array<i64: 0>} {shoal.scope = "attn"} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
    %k = shoal.onnx "Slice"(%p) {axes = array<i64: -1>, ends = array<i64: 16>, starts = array<i64: 8>} {shoal.scope = "attn"} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
    %v = shoal.onnx "Slice"(%p) {axes = array<i64: -1>, ends = array<i64: 24>, starts = array<i64: 16>} {shoal.scope = "attn"} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
    %r0 = shoal.relu %q {shoal.scope = "attn"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %r1 = shoal.relu %k {shoal.scope = "attn"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %r2 = shoal.relu %v {shoal.scope = "attn"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    return %r0, %r1, %r2 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  }
  func.func @unequal(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "q"}, tensor<2x4x4xf32> {shoal.name = "k"}, tensor<2x4x4xf32> {shoal.name = "v"}) {
    %w = shoal.weight "qkv.weight" : tensor<8x16xf32>
    %p = shoal.matmul %x, %w {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %q:3 = shoal.onnx "Split"(%p) {axis = 2 : i64, split = array<i64: 8, 4, 4>} {shoal.scope = "attn"} : (tensor<2x4x16xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>)
    return %q#0, %q#1, %q#2 : tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>
  }
  func.func @reshape_pieces(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<1x2x2x4x4xf32> {shoal.name = "q"}, tensor<2x4x2x4xf32> {shoal.name = "q2"}, tensor<2x4x2x1x4xf32> {shoal.name = "k3"}) {
    %w = shoal.weight "qkv.weight" : tensor<8x24xf32>
    %p = shoal.matmul %x, %w {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x24xf32>) -> tensor<2x4x24xf32>
    %r = shoal.reshape %p {shoal.scope = "attn"} : (tensor<2x4x24xf32>) -> tensor<2x4x3x2x4xf32>
    %t = shoal.transpose %r {perm = array<i64: 2, 0, 3, 1, 4>, shoal.scope = "attn"} : (tensor<2x4x3x2x4xf32>) -> tensor<3x2x2x4x4xf32>
    %q:3 = shoal.onnx "Split"(%t) {axis = 0 : i64, split = array<i64: 1, 1, 1>} {shoal.scope = "attn"} : (tensor<3x2x2x4x4xf32>) -> (tensor<1x2x2x4x4xf32>, tensor<1x2x2x4x4xf32>, tensor<1x2x2x4x4xf32>)
    %wq = shoal.weight "q.weight" : tensor<8x8xf32>
    %pq = shoal.matmul %x, %wq {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %rq = shoal.reshape %pq {shoal.scope = "attn"} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
    %wh = shoal.weight "heads_qkv.weight" : tensor<8x24xf32>
    %ph = shoal.matmul %x, %wh {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x24xf32>) -> tensor<2x4x24xf32>
    %rh = shoal.reshape %ph {shoal.scope = "attn"} : (tensor<2x4x24xf32>) -> tensor<2x4x2x3x4xf32>
    %k = shoal.onnx "Slice"(%rh) {starts = array<i64: 1>, ends = array<i64: 2>, axes = array<i64: 3>} {shoal.scope = "attn"} : (tensor<2x4x2x3x4xf32>) -> tensor<2x4x2x1x4xf32>
    return %q#0, %rq, %k : tensor<1x2x2x4x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x1x4xf32>
  }
  func.func @unflatten_pieces(%x: tensor<4x2x8xf32> {shoal.name = "x"}) -> (tensor<4x2x8xf32> {shoal.name = "o"}, tensor<4x2x3xf32> {shoal.name = "s"}) {
    %w = shoal.weight "mha.in_proj_weight" : tensor<8x24xf32>
    %b = shoal.weight "mha.in_proj_bias" : tensor<24xf32>
    %m = shoal.matmul %x, %w {shoal.scope = "attn"} : (tensor<4x2x8xf32>, tensor<8x24xf32>) -> tensor<4x2x24xf32>
    %p = shoal.add %m, %b {shoal.scope = "attn"} : (tensor<4x2x24xf32>, tensor<24xf32>) -> tensor<4x2x24xf32>
    %r = shoal.reshape %p {shoal.scope = "attn"} : (tensor<4x2x24xf32>) -> tensor<4x2x3x8xf32>
    %u = shoal.reshape %r {shoal.scope = "attn"} : (tensor<4x2x3x8xf32>) -> tensor<1x4x2x3x8xf32>
    %t = shoal.transpose %u {perm = array<i64: 3, 1, 2, 0, 4>, shoal.scope = "attn"} : (tensor<1x4x2x3x8xf32>) -> tensor<3x4x2x1x8xf32>
    %s = shoal.reshape %t {shoal.scope = "attn"} : (tensor<3x4x2x1x8xf32>) -> tensor<3x4x2x8xf32>
    %i0 = shoal.constant dense<0> : tensor<i64>
    %i1 = shoal.constant dense<1> : tensor<i64>
    %i2 = shoal.constant dense<2> : tensor<i64>
    %q = shoal.gather %s, %i0 {axis = 0 : i64, shoal.scope = "attn"} : (tensor<3x4x2x8xf32>, tensor<i64>) -> tensor<4x2x8xf32>
    %k = shoal.gather %s, %i1 {axis = 0 : i64, shoal.scope = "attn"} : (tensor<3x4x2x8xf32>, tensor<i64>) -> tensor<4x2x8xf32>
    %v = shoal.gather %s, %i2 {axis = 0 : i64, shoal.scope = "attn"} : (tensor<3x4x2x8xf32>, tensor<i64>) -> tensor<4x2x8xf32>
    %qk = shoal.mul %q, %k {shoal.scope = "attn"} : (tensor<4x2x8xf32>, tensor<4x2x8xf32>) -> tensor<4x2x8xf32>
    %o = shoal.mul %qk, %v {shoal.scope = "attn"} : (tensor<4x2x8xf32>, tensor<4x2x8xf32>) -> tensor<4x2x8xf32>
    %w2 = shoal.weight "other.weight" : tensor<8x24xf32>
    %m2 = shoal.matmul %x, %w2 {shoal.scope = "attn"} : (tensor<4x2x8xf32>, tensor<8x24xf32>) -> tensor<4x2x24xf32>
    %r2 = shoal.reshape %m2 {shoal.scope = "attn"} : (tensor<4x2x24xf32>) -> tensor<4x2x3x8xf32>
    %s2 = shoal.reduce_sum %r2 {axes = array<i64: 3>, keepdims = false, shoal.scope = "attn"} : (tensor<4x2x3x8xf32>) -> tensor<4x2x3xf32>
    return %o, %s2 : tensor<4x2x8xf32>, tensor<4x2x3xf32>
  }
  func.func @conv1d(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "q"}, tensor<2x4x8xf32> {shoal.name = "k"}, tensor<2x4x8xf32> {shoal.name = "v"}) {
    %w = shoal.weight "h.0.attn.c_attn.weight" : tensor<8x24xf32>
    %b = shoal.weight "h.0.attn.c_attn.bias" : tensor<24xf32>
    %f = shoal.reshape %x {shoal.scope = "attn"} : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
    %p = shoal.gemm %f, %w, %b {shoal.scope = "attn"} : (tensor<8x8xf32>, tensor<8x24xf32>, tensor<24xf32>) -> tensor<8x24xf32>
    %u = shoal.reshape %p {shoal.scope = "attn"} : (tensor<8x24xf32>) -> tensor<2x4x24xf32>
    %q:3 = shoal.onnx "Split"(%u) {axis = 2 : i64, split = array<i64: 8, 8, 8>} {shoal.scope = "attn"} : (tensor<2x4x24xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
    %r0 = shoal.relu %q#0 {shoal.scope = "attn"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %r1 = shoal.relu %q#1 {shoal.scope = "attn"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %r2 = shoal.relu %q#2 {shoal.scope = "attn"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    return %r0, %r1, %r2 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  }
}
