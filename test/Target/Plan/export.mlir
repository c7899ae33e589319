// RUN: shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_split2.yaml world-size=4" --mlir-print-debuginfo | shoal-translate --export-plan-text | FileCheck %s
// RUN: not shoal-translate --export-plan-text %inputs/mlp.mlir 2>&1 | FileCheck %s --check-prefix=NOTPAR

// One SPMD program on a 2 x 2 mesh; weights name their initializer, global
// type and sharding (each rank derives its slice); collectives carry their
// axes; a row-split Gemm is Gemm, AllReduce, Add.
// CHECK: magic: "shoal.plan"
// CHECK: format_version: 1
// CHECK: mesh {
// CHECK: name: "dp"
// CHECK: size: 2
// CHECK: name: "tp"
// CHECK: size: 2
// CHECK: sources {
// CHECK-NEXT: kind: ONNX
// CHECK-NEXT: path: "/models/mlp.onnx"
// CHECK: programs {
// CHECK: role: "spmd"
// CHECK: inputs {
// CHECK-NEXT: name: "x"
// CHECK: global_type {
// CHECK-NEXT: dtype: F32
// CHECK-NEXT: shape: 8
// CHECK-NEXT: shape: 32
// CHECK: sharding {
// CHECK-NEXT: dims {
// CHECK-NEXT: axes: "dp"
// CHECK: weights {
// CHECK: initializer: "fc1.weight"
// CHECK: global_type {
// CHECK-NEXT: dtype: F32
// CHECK-NEXT: shape: 128
// CHECK-NEXT: shape: 32
// CHECK: sharding {
// CHECK-NEXT: dims {
// CHECK-NEXT: axes: "tp"
// CHECK: ops {
// CHECK-NEXT: kind: "Gemm"
// CHECK: name: "/fc1/Gemm"
// CHECK-NEXT: task_graph: "model"
// CHECK: kind: "Erf"
// CHECK: kind: "Gemm"
// CHECK: kind: "AllReduce"
// CHECK: key: "axes"
// CHECK: strings {
// CHECK-NEXT: values: "tp"
// CHECK: kind: "Add"
// CHECK: kind: "Relu"
// CHECK: kind: "Gemm"
// CHECK: kind: "AllGather"
// CHECK: key: "dim"
// CHECK-NEXT: value {
// CHECK-NEXT: i: 1

// NOTPAR: '@main' has no shoal.task_graph; run shoal-parallelize before exporting a plan
