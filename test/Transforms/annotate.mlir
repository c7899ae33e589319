// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_split2.yaml" | FileCheck %s
// RUN: shoal-opt %inputs/gpt_block.mlir --shoal-annotate="spec=%inputs/spec_blocks.yaml" | FileCheck %s --check-prefix=BLOCKS
// Annotations written in the IR are kept when no spec is given.
// RUN: shoal-opt %s --shoal-annotate | FileCheck %s --check-prefix=INIR

// CHECK: module attributes {shoal.default_strategy = "replicate", shoal.num_micro_batch = 1 : i64, shoal.schedule_kind = "gpipe", shoal.scopes = [#shoal.scope<"model", split, 2>]
// CHECK: shoal.weight "fc1.weight" :
// CHECK: shoal.gemm {{.*}} {shoal.scope = "model", transB = true}
// CHECK: shoal.erf {{.*}} {shoal.scope = "model"}
// CHECK: shoal.relu {{.*}} {shoal.scope = "model"}

// Only the blocks match "/h.*"; the rest stays unannotated (default).
// BLOCKS: shoal.scopes = [#shoal.scope<"blocks", split, 2>]
// BLOCKS: shoal.gather
// BLOCKS-NOT: shoal.scope =
// BLOCKS-SAME: tensor<2x4x16xf32>
// BLOCKS: shoal.layer_norm {{.*}}shoal.scope = "blocks"
// BLOCKS: shoal.softmax {{.*}}shoal.scope = "blocks"
// BLOCKS: shoal.layer_norm
// BLOCKS-NOT: shoal.scope =
// BLOCKS-SAME: tensor<2x4x16xf32>
// BLOCKS: shoal.matmul
// BLOCKS-NOT: shoal.scope =
// BLOCKS-SAME: tensor<2x4x32xf32>

// INIR-LABEL: func.func @inir
// INIR: shoal.relu %{{.*}} {shoal.scope = "s"}
module attributes {shoal.scopes = [#shoal.scope<"s", replicate, 1>]} {
  func.func @inir(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = shoal.relu %x {shoal.scope = "s"} : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
