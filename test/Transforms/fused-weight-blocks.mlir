// A fused projection cut in unequal pieces (multi-query attention: H query
// heads, one key head and one value head in one weight) is computed piece
// by piece by shoal-fused-weight-views: each piece reads its block of the
// weight (shoal.source_range: the initializer, its shape, the axis and where
// the block starts), named after the block. Falcon's form: a reshape to
// [.., H + 2, d], a Slice of the query heads and a Gather of each of the
// last two heads.
// Under split(2), the query block is split by heads; the key and value
// blocks stay whole (a column split of one head would split its head size:
// the scores would be partial sums, and the value's split would meet the
// query heads' in the second product), and nothing is gathered
// (fused-weight-blocks-report.mlir: the report's note).
// RUN: shoal-opt %s --shoal-fused-weight-views | FileCheck %s
// RUN: shoal-opt %s --shoal-fused-weight-views --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition | FileCheck %s --check-prefix=PART

// CHECK-LABEL: func.func @mqa
// CHECK: %[[Q:.*]] = shoal.weight "qkv.weight[:, 0:8]" {shoal.source_range = {axis = 1 : i64, initializer = "qkv.weight", shape = array<i64: 8, 16>, start = 0 : i64}} : tensor<8x8xf32>
// CHECK: shoal.matmul %{{.*}}, %[[Q]] {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK: shoal.weight "qkv.weight[:, 8:12]" {{.*}}start = 8 : i64}} : tensor<8x4xf32>
// CHECK: shoal.weight "qkv.weight[:, 12:16]" {{.*}}start = 12 : i64}} : tensor<8x4xf32>
// CHECK: shoal.reshape {{.*}} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
// CHECK: shoal.reshape {{.*}} : (tensor<2x4x4xf32>) -> tensor<2x4x1x4xf32>
// CHECK: shoal.reshape {{.*}} : (tensor<2x4x4xf32>) -> tensor<2x4x1x4xf32>
// CHECK-NOT: "Slice"
// CHECK-NOT: shoal.gather
// CHECK: return

// GPTBigCode's form: the bias added, one Split into the query heads and
// the key/value pair; each piece gets its block of the bias too.
// CHECK-LABEL: func.func @split_with_bias
// CHECK: shoal.weight "c_attn.weight[:, 0:8]"
// CHECK: shoal.weight "c_attn.bias[0:8]" {{.*}}initializer = "c_attn.bias", shape = array<i64: 12>, start = 0 : i64}} : tensor<8xf32>
// CHECK: shoal.add {{.*}} -> tensor<2x4x8xf32>
// CHECK: shoal.weight "c_attn.weight[:, 8:12]"
// CHECK: shoal.weight "c_attn.bias[8:12]"
// CHECK: shoal.add {{.*}} -> tensor<2x4x4xf32>
// CHECK-NOT: "Split"
// CHECK: return

// A Gemm's own C and a bias added after it are two blocks of two
// initializers: each piece's Gemm reads its block of C, its Add the piece
// and its block of the added bias.
// CHECK-LABEL: func.func @gemm_c_and_add
// CHECK-DAG: %[[W0:.*]] = shoal.weight "g.weight[:, 0:8]"
// CHECK-DAG: %[[C0:.*]] = shoal.weight "g.c[0:8]"
// CHECK-DAG: %[[B0:.*]] = shoal.weight "g.bias[0:8]"
// CHECK: %[[P0:.*]] = shoal.gemm %{{.*}}, %[[W0]], %[[C0]]
// CHECK: shoal.add %[[B0]], %[[P0]] {{.*}} -> tensor<8x8xf32>
// CHECK-DAG: %[[W1:.*]] = shoal.weight "g.weight[:, 8:12]"
// CHECK-DAG: %[[C1:.*]] = shoal.weight "g.c[8:12]"
// CHECK-DAG: %[[B1:.*]] = shoal.weight "g.bias[8:12]"
// CHECK: %[[P1:.*]] = shoal.gemm %{{.*}}, %[[W1]], %[[C1]]
// CHECK: shoal.add %[[B1]], %[[P1]] {{.*}} -> tensor<8x4xf32>
// CHECK-NOT: "Split"
// CHECK: return

// A weight the model reads twice (tied) keeps its one buffer: no blocks.
// CHECK-LABEL: func.func @tied
// CHECK: shoal.weight "tied.weight" : tensor<8x12xf32>
// CHECK: "Split"

// PART-LABEL: func.func @mqa
// PART-NOT: shoal.all_gather
// PART: shoal.weight "qkv.weight[:, 0:8]" {{.*}} : tensor<8x4xf32>
// PART: shoal.weight "qkv.weight[:, 8:12]" {{.*}} : tensor<8x4xf32>
// PART: shoal.weight "qkv.weight[:, 12:16]" {{.*}} : tensor<8x4xf32>
// PART-NOT: shoal.all_gather
// PART: shoal.all_reduce
// PART-NOT: shoal.all_gather
// PART: return

module attributes {shoal.scopes = [#shoal.scope<"attn", split, 2>]} {
  func.func @mqa(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "y"}) {
    %w = shoal.weight "qkv.weight" : tensor<8x16xf32>
    %p = shoal.matmul %x, %w {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32> loc("/attn/qkv/MatMul")
    %r = shoal.reshape %p {shoal.scope = "attn"} : (tensor<2x4x16xf32>) -> tensor<2x4x4x4xf32> loc("/attn/Reshape")
    %q = shoal.onnx "Slice"(%r) {axes = array<i64: 2>, ends = array<i64: -2>, starts = array<i64: 0>, steps = array<i64: 1>} {shoal.scope = "attn"} : (tensor<2x4x4x4xf32>) -> tensor<2x4x2x4xf32> loc("/attn/Slice")
    %i2 = shoal.constant dense<-2> : tensor<1xi64>
    %k = shoal.gather %r, %i2 {axis = 2 : i64, shoal.scope = "attn"} : (tensor<2x4x4x4xf32>, tensor<1xi64>) -> tensor<2x4x1x4xf32> loc("/attn/Gather")
    %i1 = shoal.constant dense<-1> : tensor<1xi64>
    %v = shoal.gather %r, %i1 {axis = 2 : i64, shoal.scope = "attn"} : (tensor<2x4x4x4xf32>, tensor<1xi64>) -> tensor<2x4x1x4xf32> loc("/attn/Gather_1")
    %qt = shoal.transpose %q {perm = array<i64: 0, 2, 1, 3>, shoal.scope = "attn"} : (tensor<2x4x2x4xf32>) -> tensor<2x2x4x4xf32> loc("/attn/Transpose")
    %kt = shoal.transpose %k {perm = array<i64: 0, 2, 3, 1>, shoal.scope = "attn"} : (tensor<2x4x1x4xf32>) -> tensor<2x1x4x4xf32> loc("/attn/Transpose_1")
    %vt = shoal.transpose %v {perm = array<i64: 0, 2, 1, 3>, shoal.scope = "attn"} : (tensor<2x4x1x4xf32>) -> tensor<2x1x4x4xf32> loc("/attn/Transpose_2")
    %s = shoal.matmul %qt, %kt {shoal.scope = "attn"} : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32> loc("/attn/MatMul")
    %a = shoal.softmax %s {axis = -1 : i64, shoal.scope = "attn"} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32> loc("/attn/Softmax")
    %o = shoal.matmul %a, %vt {shoal.scope = "attn"} : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32> loc("/attn/MatMul_1")
    %ot = shoal.transpose %o {perm = array<i64: 0, 2, 1, 3>, shoal.scope = "attn"} : (tensor<2x2x4x4xf32>) -> tensor<2x4x2x4xf32> loc("/attn/Transpose_3")
    %m = shoal.reshape %ot {shoal.scope = "attn"} : (tensor<2x4x2x4xf32>) -> tensor<2x4x8xf32> loc("/attn/Reshape_1")
    %wo = shoal.weight "o.weight" : tensor<8x8xf32>
    %y = shoal.matmul %m, %wo {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32> loc("/attn/o/MatMul")
    return %y : tensor<2x4x8xf32>
  }
  func.func @split_with_bias(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "q"}, tensor<2x4x4xf32> {shoal.name = "kv"}) {
    %w = shoal.weight "c_attn.weight" : tensor<8x12xf32>
    %b = shoal.weight "c_attn.bias" : tensor<12xf32>
    %p = shoal.matmul %x, %w {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x12xf32>) -> tensor<2x4x12xf32>
    %pb = shoal.add %b, %p {shoal.scope = "attn"} : (tensor<12xf32>, tensor<2x4x12xf32>) -> tensor<2x4x12xf32>
    %q:2 = shoal.onnx "Split"(%pb) {axis = 2 : i64, split = array<i64: 8, 4>} {shoal.scope = "attn"} : (tensor<2x4x12xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>)
    return %q#0, %q#1 : tensor<2x4x8xf32>, tensor<2x4x4xf32>
  }
  func.func @gemm_c_and_add(%x: tensor<8x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "q"}, tensor<2x4x4xf32> {shoal.name = "kv"}) {
    %w = shoal.weight "g.weight" : tensor<8x12xf32>
    %c = shoal.weight "g.c" : tensor<12xf32>
    %b = shoal.weight "g.bias" : tensor<12xf32>
    %p = shoal.gemm %x, %w, %c {shoal.scope = "attn"} : (tensor<8x8xf32>, tensor<8x12xf32>, tensor<12xf32>) -> tensor<8x12xf32>
    %pb = shoal.add %b, %p {shoal.scope = "attn"} : (tensor<12xf32>, tensor<8x12xf32>) -> tensor<8x12xf32>
    %r = shoal.reshape %pb {shoal.scope = "attn"} : (tensor<8x12xf32>) -> tensor<2x4x12xf32>
    %q:2 = shoal.onnx "Split"(%r) {axis = 2 : i64, split = array<i64: 8, 4>} {shoal.scope = "attn"} : (tensor<2x4x12xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>)
    return %q#0, %q#1 : tensor<2x4x8xf32>, tensor<2x4x4xf32>
  }
  func.func @tied(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "q"}, tensor<2x4x4xf32> {shoal.name = "kv"}, tensor<2x4x12xf32> {shoal.name = "again"}) {
    %w = shoal.weight "tied.weight" : tensor<8x12xf32>
    %p = shoal.matmul %x, %w {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x12xf32>) -> tensor<2x4x12xf32>
    %q:2 = shoal.onnx "Split"(%p) {axis = 2 : i64, split = array<i64: 8, 4>} {shoal.scope = "attn"} : (tensor<2x4x12xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>)
    %w2 = shoal.weight "tied.weight" : tensor<8x12xf32>
    %p2 = shoal.matmul %x, %w2 {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x12xf32>) -> tensor<2x4x12xf32>
    return %q#0, %q#1, %p2 : tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x12xf32>
  }
}
