// shoal-pipeline: send/recv between stages and each stage's order of work
// (p stages, m micro-batches; F3:s1 = forward of micro-batch 3 through s1).
// RUN: shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_pp2_gpipe.yaml fuse=0" | FileCheck %s --check-prefix=GPIPE
// RUN: shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_pp2_1f1b.yaml fuse=0" | FileCheck %s --check-prefix=1F1B
// RUN: shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_pp4_1f1b.yaml fuse=0" | FileCheck %s --check-prefix=P4
// RUN: shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_pp_interleaved.yaml fuse=0" | FileCheck %s --check-prefix=INTER
// RUN: shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_pipeline.yaml fuse=0" | FileCheck %s --check-prefix=ACCUM
// RUN: shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_rep1_split2.yaml fuse=0" | FileCheck %s --check-prefix=SENDRECV
// RUN: shoal-opt %inputs/mlp_weight_out.mlir --shoal-parallelize="spec=%inputs/spec_pp_named_outputs.yaml fuse=0" | FileCheck %s --check-prefix=NAMES
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_pp_interleaved_bad.yaml" 2>&1 | FileCheck %s --check-prefix=BADM
// RUN: shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_pp2_tp2.yaml world-size=4 fuse=0" | FileCheck %s --check-prefix=SCATTER
// Training: stage 1 receives its input once; its forward TaskGraph hands
// it to the backward (which reads it), kept on stage 1, instead of a second
// transfer sent during the forward and received at the backward.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_pp2_1f1b.yaml train=%S/Inputs/train_mse_y.yaml fuse=0" | FileCheck %s --check-prefix=TRAIN --implicit-check-not="shoal.send {{.*}} id 2"
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pp2_tp2.yaml" --shoal-form-taskgraphs="world-size=4" --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-pipeline="scatter-gather=false" | FileCheck %s --check-prefix=WHOLE
// Without shoal-partition, bridges are still global: shoal-pipeline only
// moves them.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pp2_gpipe.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges --shoal-pipeline | FileCheck %s --check-prefix=GLOBAL

// In GPipe, every forward, then every backward.
// GPIPE: shoal.schedule = {{\[\[}}"F0:s0", "F1:s0", "F2:s0", "F3:s0"], ["F0:s1", "F1:s1", "F2:s1", "F3:s1"]]

// In 1F1B, stage s runs p - s - 1 warm-up forwards, then alternates.
// 1F1B: shoal.schedule = {{\[\[}}"F0:s0", "F1:s0", "F2:s0", "F3:s0"], ["F0:s1", "F1:s1", "F2:s1", "F3:s1"]]

// 1F1B with p = 4, m = 4: 3, 2, 1 and 0 warm-up forwards.
// P4: shoal.schedule = {{\[\[}}"F0:s0", "F1:s0", "F2:s0", "F3:s0"], ["F0:s1", "F1:s1", "F2:s1", "F3:s1"], ["F0:s2", "F1:s2", "F2:s2", "F3:s2"], ["F0:s3", "F1:s3", "F2:s3", "F3:s3"]]

// Interleaved 1F1B, 2 stages x 2 chunks: c0 and c2 on stage 0, c1 and c3 on
// stage 1; micro-batches go through the chunks in groups of p.
// INTER: shoal.schedule = {{\[\[}}"F0:c0", "F1:c0", "F0:c2", "F1:c2", "F2:c0", "F3:c0", "F2:c2", "F3:c2"], ["F0:c1", "F1:c1", "F0:c3", "F1:c3", "F2:c1", "F3:c1", "F2:c3", "F3:c3"]]
// INTER: shoal.task_graph "c0" {{.*}}shoal.stage = 0
// INTER: shoal.task_graph "c1" {{.*}}shoal.stage = 1
// INTER: shoal.task_graph "c2" {{.*}}shoal.stage = 0
// INTER: shoal.task_graph "c3" {{.*}}shoal.stage = 1

// One TaskGraph with micro-batches: gradient accumulation on the same
// devices, no send/recv.
// ACCUM: shoal.schedule = {{\[\[}}"F0:a", "F1:a", "F2:a", "F3:a"]]
// ACCUM-NOT: shoal.send

// The producer sends its local micro-batch (8 / 2 = 4 rows) at its end; the
// consumer's input becomes a recv at its start.
// SENDRECV: shoal.task_graph "s0" {{.*}}(%{{.*}} : tensor<4x32xf32>) -> tensor<4x128xf32>
// SENDRECV: shoal.send %[[V:.*]] id 0 from {{.*}} : tensor<4x128xf32>
// SENDRECV-NEXT: shoal.yield %[[V]]
// SENDRECV: shoal.task_graph "s1" split(2) mesh <["mb", "dp", "tp"], [2, 1, 2]> -> tensor<4x24xf32>
// SENDRECV-NEXT: shoal.recv id 0 from {{.*}} : tensor<4x128xf32>

// BADM: the interleaved schedule needs num_micro_batch (3) to be a multiple of the 2 pipeline stages

// GLOBAL: shoal.send %{{.*}} id 0 {{.*}} : tensor<8x128xf32>
// GLOBAL: shoal.recv id 0 {{.*}} : tensor<8x128xf32>

// A scope named "outputs" keeps its name; the TaskGraph for the returned
// weight gets another and runs once after the pipeline.
// NAMES: shoal.schedule = {{\[\[}}"F0:s0", {{.*}}], ["F0:outputs", {{.*}}, "F0:_outputs"]]
// NAMES: shoal.task_graph "outputs"
// NAMES: shoal.task_graph "_outputs"

// Two stages of two tp ranks: fc2's result is whole on both tp ranks of
// stage 0 and stage 1 reads it whole. Megatron's scatter/gather: each tp
// rank sends its half of the last dimension, and the receivers all-gather
// the halves over tp (inside the node).
// SCATTER: %[[V:.*]] = shoal.local_slice %{{.*}} dim 1 over ["tp"] {shoal.reason = "pipeline transfer: {{.*}}"} : (tensor<4x32xf32>) -> tensor<4x16xf32>
// SCATTER-NEXT: shoal.send %[[V]] id 0 from <{{.*}}sharding = <{{\[}}["mb"], ["tp"]]>, offset = 0, stride = 4> to <{{.*}}sharding = <{{\[}}["mb"], ["tp"]]>, offset = 2, stride = 4> : tensor<4x16xf32>
// SCATTER: %[[R:.*]] = shoal.recv id 0 {{.*}} : tensor<4x16xf32>
// SCATTER-NEXT: shoal.all_gather %[[R]] dim 1 over ["tp"] {shoal.reason = "pipeline transfer: {{.*}}"} : (tensor<4x16xf32>) -> tensor<4x32xf32>
// scatter-gather=false: the whole value from every tp rank.
// WHOLE-NOT: pipeline transfer
// WHOLE: shoal.send %{{.*}} id 0 from <{{.*}}sharding = <{{\[}}["mb"], []]>{{.*}} : tensor<4x32xf32>
// WHOLE-NOT: pipeline transfer

// TRAIN: shoal.task_graph "s0"
// TRAIN: shoal.send %{{.*}} id 0
// TRAIN: %[[S1:.*]]:5 = shoal.task_graph "s1" {{.*}} -> tensor<2x32xf32>, tensor<2x32xf32>, tensor<2x24xf32>, tensor<f32>, tensor<2x128xf32>
// TRAIN-NEXT: ^bb0
// TRAIN-NEXT: %[[IN:.*]] = shoal.recv id 0
// TRAIN: shoal.yield {{.*}}, %[[IN]] : {{.*}}, tensor<2x128xf32>
// TRAIN: shoal.task_graph "s1.bwd" {{.*}}(%[[S1]]#2, %[[S1]]#1, %[[S1]]#0, %[[S1]]#4 :
// TRAIN-NOT: shoal.recv id 0
// TRAIN: shoal.send %{{.*}} id 1
// TRAIN: shoal.task_graph "s0.bwd"
// TRAIN: shoal.recv id 1
