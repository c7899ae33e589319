// Shards by speed (docs/Planner.md "Uneven shards"): shoal-plan gives a split
// scope on devices of different speeds shards in proportion to them
// (shoal.uneven_shards); shoal-partition keeps the even types, marks every
// value whose blocks differ between ranks with its global shape and sharding
// (shoal.uneven_layouts) and the TaskGraph with its uneven axis; the plan
// export writes them as Program.uneven_axes and value_layouts.

// The GPT blocks split over 8 V100 + 8 T4: 90 and 35 per mille (82 and 43 by
// speed alone; the V100s also do the ops that are not split faster).
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_split16.yaml" --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml shard-multiple=64" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition 2>&1 | FileCheck %s --check-prefix=MARK
// MARK-NOT: warning
// MARK: shoal.shard_multiple = 64 : i64
// MARK-SAME: shoal.uneven_shards = {blocks = array<i64: 90, 90, 90, 90, 90, 90, 90, 90, 35, 35, 35, 35, 35, 35, 35, 35>}
// The TaskGraph of the blocks:
// MARK: shoal.task_graph "blocks"{{.*}}shoal.uneven = {axis = "tp", multiple = 64 : i64, weights = array<i64: 90, 90, 90, 90, 90, 90, 90, 90, 35, 35, 35, 35, 35, 35, 35, 35>}
// The q projection's weight and result: even local types, uneven layouts.
// MARK: shoal.weight "h.0.attn.q.weight" {{.*}}shoal.uneven_layouts = [{global_shape = array<i64: 1024, 1024>, sharding = #shoal.sharding<{{\[\[\], \["tp"\]\]}}>}]} : tensor<1024x64xf32>
// MARK: shoal.matmul {{.*}}shoal.uneven_layouts = [{global_shape = array<i64: 32, 512, 1024>, sharding = #shoal.sharding<{{\[\[\], \[\], \["tp"\]\]}}>}]} : (tensor<32x512x1024xf32>, tensor<1024x64xf32>) -> tensor<32x512x64xf32>

// The whole GPT split: its vocabulary-parallel embedding cannot take blocks
// of different sizes; the TaskGraph keeps equal blocks, and says why.
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-plan="cluster=%inputs/cluster_cpu_slow_fast.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition 2>&1 | FileCheck %s --check-prefix=REFUSE
// REFUSE: warning: {{.*}}shoal-partition: the shards by speed of TaskGraph 'model' over 'tp' (200/800) are not compiled: 'shoal.gather' (/wte/Gather) does not take blocks of different sizes; every rank gets an equal block
// REFUSE-NOT: shoal.uneven_layouts
// REFUSE-NOT: shoal.uneven =

// Heads whose size is not a multiple (64 units of 1 against 16 heads): a
// reshape into heads would cut a block apart.
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_split16.yaml" --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml shard-multiple=1" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition 2>&1 | FileCheck %s --check-prefix=HEADS
// HEADS: warning: {{.*}}shoal-partition: the shards by speed of TaskGraph 'blocks' over 'tp' ({{.*}}) are not compiled: 'shoal.reshape' ({{.*}}) would cut a block of its input apart over 'tp'
