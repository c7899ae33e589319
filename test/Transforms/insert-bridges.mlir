// Every kind of bridge between TaskGraphs on different device sets, on the
// MLP of Inputs/mlp.mlir (fc1 -> erf -> fc2 -> relu -> fc3).
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_rep1_split2.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges | FileCheck %s --check-prefix=REP-SPLIT
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_split2_rep2.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges | FileCheck %s --check-prefix=SPLIT-REP
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_split2_split4.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges | FileCheck %s --check-prefix=SPLIT-SPLIT
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_rep1_rep2.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges | FileCheck %s --check-prefix=REP-REP
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pp2_gpipe.yaml" --shoal-form-taskgraphs="world-size=4" --shoal-propagate-sharding --shoal-insert-bridges | FileCheck %s --check-prefix=DP
// Same devices (no pipeline): no bridge op; shoal-partition reshards inside.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_blocks_like.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-insert-bridges | FileCheck %s --check-prefix=SAME
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_rep2_split3.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges | FileCheck %s --check-prefix=REP2-SPLIT3
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-form-taskgraphs --shoal-insert-bridges 2>&1 | FileCheck %s --check-prefix=ERR

// replicate(1) on rank 0 -> split(2) on ranks 1-2: the batch, cut into 2
// micro-batches, goes whole over tp to both ranks of the split stage.
// REP-SPLIT: %[[A:.*]] = shoal.task_graph "s0" replicate(1) mesh <["mb", "dp", "tp"], [2, 1, 1]>
// REP-SPLIT-SAME: shoal.placement = array<i64: 0, 3>
// REP-SPLIT: %[[B:.*]] = shoal.bridge %[[A]] from <mesh = <["mb", "dp", "tp"], [2, 1, 1]>, sharding = <{{\[\[}}"mb"], []]>, offset = 0, stride = 3> to <mesh = <["mb", "dp", "tp"], [2, 1, 2]>, sharding = <{{\[\[}}"mb"], []]>, offset = 1, stride = 3> : (tensor<8x128xf32>) -> tensor<8x128xf32>
// REP-SPLIT: shoal.task_graph "s1" split(2) mesh <["mb", "dp", "tp"], [2, 1, 2]>(%[[B]] : tensor<8x128xf32>)
// REP-SPLIT-SAME: shoal.placement = array<i64: 1, 3>

// split(2) -> replicate(2): fc1's column-split output leaves split over tp
// on the hidden dimension and arrives split over tp on the batch (a bridge
// that changes the split dimension; no all_gather in the producer).
// SPLIT-REP: shoal.bridge %{{.*}} from <mesh = <["mb", "dp", "tp"], [2, 1, 2]>, sharding = <{{\[\[}}"mb"], ["tp"]]>, offset = 0, stride = 4> to <mesh = <["mb", "dp", "tp"], [2, 1, 2]>, sharding = <{{\[\[}}"mb", "tp"], []]>, offset = 2, stride = 4>

// split(2) -> split(4): the hidden dimension goes from 2 to 4 blocks; the
// consumer's fc2 then contracts a split dimension (row parallel).
// SPLIT-SPLIT: shoal.bridge %{{.*}} from <mesh = <["mb", "dp", "tp"], [2, 1, 2]>, sharding = <{{\[\[}}"mb"], ["tp"]]>, offset = 0, stride = 6> to <mesh = <["mb", "dp", "tp"], [2, 1, 4]>, sharding = <{{\[\[}}"mb"], ["tp"]]>, offset = 2, stride = 6>
// SPLIT-SPLIT: "s1" split(4)
// SPLIT-SPLIT: shoal.gemm {{.*}}shoal.factor_sharding = {{\[\[}}"mb"], [], ["tp"]]

// replicate(1) -> replicate(2): the whole batch on one rank is cut in two.
// REP-REP: shoal.bridge %{{.*}} from <mesh = <["dp", "tp"], [1, 1]>, sharding = <{{\[\[}}], []]>, offset = 0, stride = 3> to <mesh = <["dp", "tp"], [1, 2]>, sharding = <{{\[\[}}"tp"], []]>, offset = 1, stride = 3>

// Two pipeline replicas on 4 ranks: stage 0 on ranks 0 and 2, stage 1 on 1
// and 3; each replica's half of the batch goes to its own next stage.
// DP: shoal.bridge %{{.*}} from <mesh = <["mb", "dp", "tp"], [4, 2, 1]>, sharding = <{{\[\[}}"mb", "dp"], []]>, offset = 0, stride = 2> to <mesh = <["mb", "dp", "tp"], [4, 2, 1]>, sharding = <{{\[\[}}"mb", "dp"], []]>, offset = 1, stride = 2>

// SAME: shoal.task_graph "head"
// SAME-NOT: shoal.bridge
// SAME: shoal.task_graph "body"

// ERR: TaskGraph 'default' has no shardings; run shoal-propagate-sharding first

// replicate(2) -> split(3): the batch cut over tp is not the split stage's
// (tp is for its weights), but the micro-batch cut stays on both sides.
// REP2-SPLIT3: shoal.bridge %{{.*}} from <mesh = <["mb", "dp", "tp"], [2, 1, 2]>, sharding = <{{\[\[}}"mb", "tp"], []]>, offset = 0, stride = 5> to <mesh = <["mb", "dp", "tp"], [2, 1, 3]>, sharding = <{{\[\[}}"mb"], []]>, offset = 2, stride = 5>
