// A device count that does not divide the dimension it would split.
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_split3.yaml" 2>&1 | FileCheck %s
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_split2.yaml world-size=32" 2>&1 | FileCheck %s --check-prefix=BATCH

// CHECK: split(3) of TaskGraph 'model': node '/fc1/Gemm' would split a dimension of size 128 of weight 'fc1.weight' over 3 devices, but 3 does not divide 128 (uneven shards are not supported yet)
// BATCH: graph input 'x' has batch dimension 8, which cannot be split evenly into 16 parts (dp=16;
