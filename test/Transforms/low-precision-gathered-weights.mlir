// shoal-mixed-precision (bf16, the model in bf16): a stack of experts'
// matrices gathered per token by routing ids (transformers 5's batched_mm
// experts, `w1[ids]`) holds more elements than the stack. The product reads
// the lookup in bf16, so the stack is cast once and the lookup is made of
// the bf16 copy: no float32 [tokens, 8, 4] lookup is made and cast. An
// embedding table, larger than its lookup, is looked up in float32 and its
// rows cast after (low-precision.mlir, EMB).
// RUN: shoal-opt %s --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-mixed-precision="precision=bf16" | FileCheck %s

// CHECK: %[[W:.*]] = shoal.weight "experts.w1" : tensor<3x8x4xf32>
// CHECK: %[[L:.*]] = shoal.cast %[[W]] {{.*}}: (tensor<3x8x4xf32>) -> tensor<3x8x4xbf16>
// CHECK-NEXT: %[[G:.*]] = shoal.gather %[[L]], %{{.*}} : (tensor<3x8x4xbf16>, tensor<12xi64>) -> tensor<12x8x4xbf16>
// CHECK: shoal.matmul %{{.*}}, %[[G]] : (tensor<12x1x8xbf16>, tensor<12x8x4xbf16>) -> tensor<12x1x4xbf16>
// A second lookup in the same table reads the same bf16 copy.
// CHECK: shoal.gather %[[L]], %{{.*}} : (tensor<3x8x4xbf16>, tensor<12xi64>) -> tensor<12x8x4xbf16>
// CHECK-NOT: -> tensor<12x8x4xf32>
// CHECK-NOT: shoal.cast %[[W]]
// CHECK: shoal.gather_grad %{{.*}}, %{{.*}} {{.*}}-> tensor<3x8x4xf32>

module attributes {shoal.source = "/models/experts.onnx"} {
  func.func @main(%x: tensor<12x1x8xf32> {shoal.name = "x"}, %ids: tensor<12xi64> {shoal.name = "expert_ids"}, %ids2: tensor<12xi64> {shoal.name = "expert_ids_2"}) -> (tensor<12x1x4xf32> {shoal.name = "y"}) {
    %w = shoal.weight "experts.w1" : tensor<3x8x4xf32> loc("experts.w1")
    %g = shoal.gather %w, %ids : (tensor<3x8x4xf32>, tensor<12xi64>) -> tensor<12x8x4xf32> loc("/experts/Gather")
    %y = shoal.matmul %x, %g : (tensor<12x1x8xf32>, tensor<12x8x4xf32>) -> tensor<12x1x4xf32> loc("/experts/MatMul")
    %g2 = shoal.gather %w, %ids2 : (tensor<3x8x4xf32>, tensor<12xi64>) -> tensor<12x8x4xf32> loc("/experts/Gather_1")
    %y2 = shoal.matmul %x, %g2 : (tensor<12x1x8xf32>, tensor<12x8x4xf32>) -> tensor<12x1x4xf32> loc("/experts/MatMul_1")
    %s = shoal.add %y, %y2 : (tensor<12x1x4xf32>, tensor<12x1x4xf32>) -> tensor<12x1x4xf32> loc("/experts/Add")
    return %s : tensor<12x1x4xf32>
  }
}
