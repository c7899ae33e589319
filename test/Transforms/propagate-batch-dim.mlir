// The spec's `inputs: {x: {batch_dim: 1}}` (a sequence-first model): the
// annotation marks the graph input, and the data-parallel split goes on
// its dimension 1 instead of 0.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_input_batch_dim1.yaml" | FileCheck %s --check-prefix=ANN
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_input_batch_dim1.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding | FileCheck %s

// ANN: func.func @main(%{{.*}}: tensor<8x32xf32> {shoal.batch_dim = 1 : i64, shoal.name = "x"})
// CHECK: func.func @main(%{{.*}}: tensor<8x32xf32> {shoal.batch_dim = 1 : i64, shoal.name = "x", shoal.sharding = #shoal.sharding<{{\[}}[], ["tp"]]>})
