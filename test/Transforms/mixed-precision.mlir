// shoal-mixed-precision (docs/Training.md "Mixed precision") on a training
// module: every matrix product, forward and backward, reads its float32
// operands through casts to the low type and is cast back to float32 for
// its readers; a product reading another's result reads the low value
// itself. The weights, their gradients (what shoal.adamw reads) and the
// optimizer state stay float32. A value read by several products of one
// phase is cast once; the backward casts its own copy.
// RUN: shoal-opt %inputs/two_layer_attention.mlir --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-mixed-precision="precision=bf16 autocast" | FileCheck %s --check-prefix=BF16
// fp16 with loss scaling: the scaler goes into the training attribute, and
// shoal-autodiff{loss-scale-seed} marked the gradient seed.
// RUN: shoal-opt %inputs/two_layer_attention.mlir --shoal-autodiff="loss=mse loss-scale-seed" --shoal-optimizer --shoal-mixed-precision="precision=fp16 autocast loss-scale initial-scale=1024 growth-interval=10" | FileCheck %s --check-prefix=FP16
// fp32 changes nothing; bad options are errors.
// RUN: shoal-opt %inputs/two_layer_attention.mlir --shoal-mixed-precision="precision=fp32" | FileCheck %s --check-prefix=FP32 --implicit-check-not=shoal.cast
// RUN: not shoal-opt %inputs/two_layer_attention.mlir --shoal-mixed-precision="precision=fp8" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not shoal-opt %inputs/two_layer_attention.mlir --shoal-mixed-precision="precision=bf16 loss-scale" 2>&1 | FileCheck %s --check-prefix=BF16LS
// RUN: not shoal-opt %inputs/two_layer_attention.mlir --shoal-mixed-precision="precision=fp16 loss-scale backoff-factor=1.5" 2>&1 | FileCheck %s --check-prefix=BACKOFF
// RUN: not shoal-opt %inputs/two_layer_attention.mlir --shoal-mixed-precision="precision=fp16 loss-scale initial-scale=8 min-scale=16" 2>&1 | FileCheck %s --check-prefix=MIN

// BF16: module attributes {shoal.training = {{{.*}}precision = "bf16", precision_mode = "autocast"}}
// BF16: %[[W0:.*]] = shoal.weight "h.0.q" : tensor<8x8xf32>
// BF16: %[[X:.*]] = shoal.cast %arg0 {shoal.precision_cast{{.*}}} : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
// BF16: %[[W0L:.*]] = shoal.cast %[[W0]] {shoal.precision_cast{{.*}}} : (tensor<8x8xf32>) -> tensor<8x8xbf16>
// BF16: %[[Q0:.*]] = shoal.matmul %[[X]], %[[W0L]] : (tensor<2x4x8xbf16>, tensor<8x8xbf16>) -> tensor<2x4x8xbf16>
// BF16: %[[Q0F:.*]] = shoal.cast %[[Q0]] {shoal.precision_cast{{.*}}} : (tensor<2x4x8xbf16>) -> tensor<2x4x8xf32>
// BF16: %[[KT:.*]] = shoal.transpose %[[Q0F]]
// BF16: %[[KTL:.*]] = shoal.cast %[[KT]]
// The scores read the query product's low value, not a second cast.
// BF16: shoal.matmul %[[Q0]], %[[KTL]] : (tensor<2x4x8xbf16>, tensor<2x8x4xbf16>) -> tensor<2x4x4xbf16>
// BF16: shoal.softmax {{.*}} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
// The head's weight gradient: a bf16 Gemm, cast back for AdamW.
// BF16: %[[GW:.*]] = shoal.gemm {{.*}}shoal.phase = "backward", transA = true} : (tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8x8xbf16>
// BF16: %[[GWF:.*]] = shoal.cast %[[GW]] {shoal.phase = "backward", shoal.precision_cast{{.*}}} : (tensor<8x8xbf16>) -> tensor<8x8xf32>
// BF16: shoal.adamw %{{.*}}, %[[GWF]], {{.*}} : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>

// FP16: module attributes {shoal.training = {{{.*}}loss_scale = {backoff_factor = 5.000000e-01 : f64, growth_factor = 2.000000e+00 : f64, growth_interval = 10 : i64, initial = 1.024000e+03 : f64, min = 1.000000e+00 : f64}, {{.*}}precision = "fp16", precision_mode = "autocast"}}
// FP16: shoal.matmul {{.*}} -> tensor<2x4x8xf16>
// FP16: shoal.constant {shoal.loss_scale, shoal.phase = "backward"} dense<1.000000e+00> : tensor<f32>

// FP32: shoal.matmul %arg0, %{{.*}} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>

// BAD: shoal-mixed-precision: precision must be fp32, bf16 or fp16, got 'fp8'
// BF16LS: shoal-mixed-precision: loss scaling is for fp16 (bf16 has float32's exponent range), but the precision is bf16
// BACKOFF: shoal-mixed-precision: loss_scale.backoff_factor must be in (0, 1)
// MIN: shoal-mixed-precision: loss_scale.min must be > 0 and at most the initial scale
