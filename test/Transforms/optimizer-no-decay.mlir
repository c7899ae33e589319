// shoal-optimizer's weight-decay groups and schedules (docs/Training.md,
// "no_decay", "lr_schedule"): by default biases and norms (one dimension in
// the source model, or named *bias) get no weight decay, as in Megatron-LM;
// a packed weight keeps its source shape's rank (shoal.source_shape);
// no-decay patterns exempt more weights; decay-all decays every weight the
// patterns do not name. The schedule is an attribute of every update.
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_one_scope.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer="weight-decay=0.1 lr-schedule=linear" | FileCheck %s --check-prefix=DEFAULT
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_one_scope.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer="weight-decay=0.1 no-decay=w.*" | FileCheck %s --check-prefix=PATTERN
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_one_scope.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer="weight-decay=0.1 decay-all=true" | FileCheck %s --check-prefix=ALL
// RUN: not shoal-opt %s --shoal-annotate="spec=%inputs/spec_one_scope.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer="lr-schedule=step" 2>&1 | FileCheck %s --check-prefix=BAD

// DEFAULT-DAG: %[[W:.*]] = shoal.weight "w.weight"
// DEFAULT-DAG: %[[B:.*]] = shoal.weight "w.bias"
// DEFAULT-DAG: %[[N:.*]] = shoal.weight "norm.scale"
// DEFAULT-DAG: %[[P:.*]] = shoal.weight "packed.scale"
// DEFAULT-DAG: shoal.adamw %[[W]], {{.*}}lr_schedule = "linear"{{.*}}weight_decay = 1.000000e-01
// DEFAULT-DAG: shoal.adamw %[[B]], {{.*}}weight_decay = 0.000000e+00
// DEFAULT-DAG: shoal.adamw %[[N]], {{.*}}weight_decay = 0.000000e+00
// DEFAULT-DAG: shoal.adamw %[[P]], {{.*}}weight_decay = 0.000000e+00

// PATTERN-DAG: %[[W:.*]] = shoal.weight "w.weight"
// PATTERN-DAG: %[[N:.*]] = shoal.weight "norm.scale"
// PATTERN-DAG: shoal.adamw %[[W]], {{.*}}weight_decay = 0.000000e+00
// PATTERN-DAG: shoal.adamw %[[N]], {{.*}}weight_decay = 0.000000e+00

// ALL-DAG: %[[B:.*]] = shoal.weight "w.bias"
// ALL-DAG: %[[N:.*]] = shoal.weight "norm.scale"
// ALL-DAG: shoal.adamw %[[B]], {{.*}}weight_decay = 1.000000e-01
// ALL-DAG: shoal.adamw %[[N]], {{.*}}weight_decay = 1.000000e-01

// BAD: unknown learning-rate schedule 'step' (expected cosine, linear or constant)

module {
  func.func @main(%x: tensor<4x8xf32> {shoal.name = "x"}) -> (tensor<4x8xf32> {shoal.name = "y"}) {
    %w = shoal.weight "w.weight" : tensor<8x8xf32> loc("w.weight")
    %b = shoal.weight "w.bias" : tensor<8xf32> loc("w.bias")
    %n = shoal.weight "norm.scale" : tensor<8xf32> loc("norm.scale")
    %p = shoal.weight "packed.scale" {shoal.source_shape = array<i64: 8>} : tensor<1x8xf32> loc("packed.scale")
    %h = shoal.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> loc("/s0/MatMul")
    %hb = shoal.add %h, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> loc("/s0/Add")
    %hn = shoal.mul %hb, %n : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> loc("/s0/Mul")
    %y = shoal.mul %hn, %p : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32> loc("/s0/Mul2")
    return %y : tensor<4x8xf32>
  }
}
