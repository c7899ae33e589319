// RUN: shoal-opt %inputs/gpt_block.mlir --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=4" --shoal-propagate-sharding | FileCheck %s
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding | FileCheck %s --check-prefix=MLP

// Megatron-LM's layout comes out of the sharding rules: q, k, v and the MLP's
// first layer are column-split, attention runs on split heads, the output
// projections are row-split (their contracted factor arrives split), the
// LayerNorms stay whole, the LM head is column-split, and the embedding
// table is split by rows (vocabulary-parallel: each rank looks up its rows,
// the rows factor of the gather carries tp and its result is whole).

// CHECK-LABEL: func.func @main
// CHECK-SAME: shoal.sharding = #shoal.sharding<{{\[}}["dp"], []]>
// TaskGraph outputs are whole over tp.
// CHECK: shoal.task_graph "model" split(2) {{.*}} attributes {shoal.arg_shardings = [#shoal.sharding<{{\[}}["dp"], []]>], shoal.in_shardings = [#shoal.sharding<{{\[}}["dp"], []]>], shoal.sharding = [#shoal.sharding<{{\[}}["dp"], [], []]>]}
// CHECK: shoal.weight "wte.weight" {shoal.sharding = [#shoal.sharding<{{\[}}["tp"], []]>]}
// CHECK: shoal.gather {{.*}}{shoal.factor_sharding = {{\[}}["tp"], [], ["dp"], []], shoal.sharding = [#shoal.sharding<{{\[}}["dp"], [], []]>]}
// CHECK: shoal.layer_norm {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], [], []]>]
// CHECK: shoal.weight "wq" {shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"]]>]}
// CHECK: shoal.matmul {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], [], ["tp"]]>]
// CHECK: shoal.weight "bq" {shoal.sharding = [#shoal.sharding<{{\[}}["tp"]]>]}
// CHECK: shoal.weight "wk" {shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"]]>]}
// CHECK: shoal.weight "wv" {shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"]]>]}
// Splitting C = (heads, head_dim) splits the heads.
// CHECK: shoal.reshape {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], [], ["tp"], []]>]
// CHECK: shoal.transpose {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], ["tp"], [], []]>]
// CHECK: shoal.matmul {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], ["tp"], [], []]>]
// CHECK: shoal.weight "mask" {shoal.sharding = [#shoal.sharding<{{\[}}[], []]>]}
// CHECK: shoal.softmax {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], ["tp"], [], []]>]
// CHECK: shoal.reshape {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], [], ["tp"]]>]
// Row split: the contracted factor (last) carries tp, the result is whole.
// CHECK: shoal.weight "wo" {shoal.sharding = [#shoal.sharding<{{\[}}["tp"], []]>]}
// CHECK: shoal.matmul {{.*}}{shoal.factor_sharding = {{\[}}["dp"], [], [], ["tp"]], shoal.sharding = [#shoal.sharding<{{\[}}["dp"], [], []]>]}
// CHECK: shoal.weight "wfc" {shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"]]>]}
// CHECK: shoal.erf {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], [], ["tp"]]>]
// CHECK: shoal.weight "wpr" {shoal.sharding = [#shoal.sharding<{{\[}}["tp"], []]>]}
// CHECK: shoal.weight "ln_f.weight" {shoal.sharding = [#shoal.sharding<{{\[}}[]]>]}
// CHECK: shoal.weight "lm_head" {shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"]]>]}
// CHECK: shoal.matmul {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["dp"], [], ["tp"]]>]

// Gemm with transB (PyTorch's Linear): column, row, column; world size 2
// leaves no data parallelism, so the batch is whole.
// MLP-LABEL: func.func @main
// MLP: shoal.weight "fc1.weight" {shoal.sharding = [#shoal.sharding<{{\[}}["tp"], []]>]}
// MLP: shoal.weight "fc1.bias" {shoal.sharding = [#shoal.sharding<{{\[}}["tp"]]>]}
// MLP: shoal.gemm {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"]]>]
// MLP: shoal.weight "fc2.weight" {shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"]]>]}
// MLP: shoal.weight "fc2.bias" {shoal.sharding = [#shoal.sharding<{{\[}}[]]>]}
// MLP: shoal.gemm {{.*}}{shoal.factor_sharding = {{\[}}[], [], ["tp"]], shoal.sharding = [#shoal.sharding<{{\[}}[], []]>], transB = true}
// MLP: shoal.weight "fc3.weight" {shoal.sharding = [#shoal.sharding<{{\[}}["tp"], []]>]}
