//===- LossMath.h - Loss and normalization gradients, CPU and GPU -*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The per-element arithmetic of the softmax cross-entropy (whole and
// vocabulary-parallel), its gradient, softmax's gradient and the
// LayerNorm/RMSNorm input gradient, as functions that the CPU kernels
// (cpu/VectorImpl.cpp) and the CUDA kernels (cuda/TrainingKernels.cu) both
// call, so that the CPU tests check the GPU's arithmetic too. The row
// reductions around them (max, sums) are each side's own: vector loops on
// the CPU, CUB block reductions on the GPU. Light: no CUDA header.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_LOSSMATH_H
#define SHOAL_RUNTIME_LOSSMATH_H

#include "HostDevice.h"

#include <cmath>
#include <cstdint>

namespace shoal {
namespace rt {

/// The loss of one row from its log-sum-exp and the logit at its label:
/// lse - x[label], 0 for an ignored row.
SHOAL_HOST_DEVICE static inline float crossEntropyLoss(float lse, float atLabel,
                                                       bool ignored) {
  return ignored ? 0.f : lse - atLabel;
}

/// d loss / d x[j] away from the label: softmax(x)[j] * dloss, from
/// e = exp(x[j] - max) and scale = dloss / sum(e).
SHOAL_HOST_DEVICE static inline float crossEntropyGradAway(float e,
                                                           float scale) {
  return e * scale;
}

/// At the label: (p - 1) * dloss, from p itself rather than p * d - d.
SHOAL_HOST_DEVICE static inline float crossEntropyGradAtLabel(float p,
                                                              float dloss) {
  return (p - 1.f) * dloss;
}

/// The vocabulary-parallel loss of one row from the statistics summed over
/// the ranks: log(sum exp(x - max)) + max - x[label], in double.
SHOAL_HOST_DEVICE static inline float vocabLoss(double sum, double max,
                                                double atLabel) {
  return static_cast<float>(log(sum) + max - atLabel);
}

/// Its gradient at one element of this rank's block: exp(x - max) * scale,
/// scale = dloss / sum (the label's then less dloss), in double.
SHOAL_HOST_DEVICE static inline float vocabGradAway(float x, float max,
                                                    double scale) {
  return static_cast<float>(exp(double(x) - double(max)) * scale);
}

/// At the label: the element's value less dloss.
SHOAL_HOST_DEVICE static inline float vocabGradAtLabel(float away,
                                                       float dloss) {
  return static_cast<float>(double(away) - double(dloss));
}

/// Softmax's input gradient at one element of a row: y * (dy - dot), dot
/// the row's sum of y * dy.
SHOAL_HOST_DEVICE static inline float softmaxGradElement(float y, float dy,
                                                         float dot) {
  return y * (dy - dot);
}

/// The normalized input (x - mu) * inv (mu = 0 for RMSNorm).
SHOAL_HOST_DEVICE static inline float normalized(float x, float mu, float inv) {
  return (x - mu) * inv;
}

/// LayerNorm's input gradient at one element: (dy * g - mean(dy * g) -
/// xhat * mean(dy * g * xhat)) * inv, with meanG = 0 for RMSNorm.
SHOAL_HOST_DEVICE static inline float
layerNormGradElement(float dy, float g, float xhat, float meanG, float meanGX,
                     float inv) {
  return (dy * g - meanG - xhat * meanGX) * inv;
}

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_LOSSMATH_H
