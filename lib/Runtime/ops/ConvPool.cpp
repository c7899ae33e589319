//===- ConvPool.cpp - Type rules: convolution and pooling -------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "ops/TypeRules.h"

#include "plan.pb.h"

#include <fmt/format.h>

#include <algorithm>

using namespace shoal;
using namespace shoal::rt;

namespace {

/// Reads the sliding-window attributes of Conv and the pools for `sr`
/// spatial dimensions and the given kernel.
WindowParams readWindow(const AttrReader &attrs, std::size_t sr,
                        std::vector<int64_t> kernel, bool hasDilations,
                        bool hasCeilMode) {
  std::string autoPad = attrs.getString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET")
    throw Error(fmt::format("auto_pad '{}' is not supported: the compiler "
                            "must resolve it into 'pads' and set auto_pad to "
                            "NOTSET",
                            autoPad));
  WindowParams w;
  w.kernel = std::move(kernel);
  w.strides = readList(attrs, "strides", sr, 1, 1, "one per spatial dimension");
  w.pads = readList(attrs, "pads", 2 * sr, 0, 0,
                    "the begin of every spatial dimension, then the ends");
  w.dilations = hasDilations ? readList(attrs, "dilations", sr, 1, 1,
                                        "one per spatial dimension")
                             : std::vector<int64_t>(sr, 1);
  w.ceilMode = hasCeilMode && attrs.getBool("ceil_mode", false);
  return w;
}

} // namespace

/// Conv.
void shoal::rt::convRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  const TensorType &w = *ctx.in(1);
  ctx.requireDType(x, DType::F32, "input X");
  ctx.requireDType(w, DType::F32, "input W");
  std::size_t rank = x.shape.size();
  if (rank < 3)
    throw Error(fmt::format("input X must be [N, C, spatial...] with at "
                            "least one spatial dimension, got {}",
                            x.str()));
  if (w.shape.size() != rank)
    throw Error(fmt::format("input W must have the rank of X ({}), got {}",
                            rank, w.str()));
  a.group = ctx.attrs.getInt("group", 1);
  if (a.group < 1)
    throw Error(fmt::format("group must be >= 1, got {}", a.group));
  if (w.shape[1] * a.group != x.shape[1])
    throw Error(fmt::format("X has {} channels, but W {} with group {} "
                            "takes {}",
                            x.shape[1], w.str(), a.group,
                            w.shape[1] * a.group));
  int64_t m = w.shape[0];
  if (m % a.group != 0)
    throw Error(fmt::format("W has {} output channels, not a multiple of "
                            "group {}",
                            m, a.group));
  std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
  std::vector<int64_t> ks = ctx.attrs.getInts("kernel_shape");
  if (!ks.empty() && ks != kernel)
    throw Error(fmt::format("attribute 'kernel_shape' {} does not match W "
                            "{}",
                            formatShape(ks), w.str()));
  for (int64_t k : kernel)
    if (k < 1)
      throw Error(fmt::format("W {} has an empty kernel", w.str()));
  a.window = readWindow(ctx.attrs, rank - 2, kernel, true, false);
  if (const TensorType *b = ctx.in(2)) {
    ctx.requireDType(*b, DType::F32, "input B");
    if (b->shape != Shape{m})
      throw Error(fmt::format("input B must be f32[{}], got {}", m, b->str()));
  }
  ctx.expected.push_back({DType::F32, windowOutputShape(x.shape, m, a.window)});
}

/// MaxPool, AveragePool.
void shoal::rt::poolRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  // MaxPool also on 8-bit integers (their max is exact in f32).
  if (!(ctx.kind() == OpKind::MaxPool &&
        (x.dtype == DType::U8 || x.dtype == DType::I8)))
    ctx.requireFloat(x, "input X");
  std::size_t rank = x.shape.size();
  if (rank < 3)
    throw Error(fmt::format("input X must be [N, C, spatial...] with at "
                            "least one spatial dimension, got {}",
                            x.str()));
  ctx.attrs.require("kernel_shape");
  std::vector<int64_t> kernel = readList(ctx.attrs, "kernel_shape", rank - 2, 1,
                                         1, "one per spatial dimension of X");
  bool isMax = ctx.kind() == OpKind::MaxPool;
  a.window = readWindow(ctx.attrs, rank - 2, kernel, isMax, true);
  if (isMax) {
    int64_t order = ctx.attrs.getInt("storage_order", 0);
    if (order != 0)
      throw Error(fmt::format("storage_order {} is not supported (only 0, "
                              "row major)",
                              order));
    if (ctx.info.outputs.size() > 1 && ctx.info.outputs[1] >= 0)
      throw Error("the Indices output (#1) is not supported");
  } else {
    a.countIncludePad = ctx.attrs.getBool("count_include_pad", false);
  }
  TensorType out{x.dtype, windowOutputShape(x.shape, x.shape[1], a.window)};
  ctx.expected.assign(ctx.info.outputs.size(), out);
}

/// GlobalAveragePool, GlobalMaxPool.
void shoal::rt::globalPoolRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  ctx.requireDType(x, DType::F32, "input X");
  if (x.shape.size() < 2)
    throw Error(fmt::format("input X must be [N, C, ...], got {}", x.str()));
  Shape shape = x.shape;
  std::fill(shape.begin() + 2, shape.end(), 1);
  ctx.expected.push_back({DType::F32, shape});
}

/// ConvInputGrad(x, W, dy), ConvWeightGrad(x, dy).
void shoal::rt::convGradRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  bool input = ctx.kind() == OpKind::ConvInputGrad;
  const TensorType &dy = *ctx.in(input ? 2 : 1);
  ctx.requireDType(x, DType::F32, "input x");
  ctx.requireDType(dy, DType::F32, "input dy");
  std::size_t rank = x.shape.size();
  if (rank < 3 || dy.shape.size() != rank)
    throw Error(fmt::format("x must be [N, C, spatial...] and dy of its "
                            "rank, got {} and {}",
                            x.str(), dy.str()));
  a.group = ctx.attrs.getInt("group", 1);
  if (a.group < 1 || x.shape[1] % a.group != 0 || dy.shape[1] % a.group != 0)
    throw Error(fmt::format("group {} does not divide the channels of x {} "
                            "and dy {}",
                            a.group, x.str(), dy.str()));
  int64_t m = dy.shape[1];
  Shape wShape{m, x.shape[1] / a.group};
  std::vector<int64_t> kernel;
  if (input) {
    const TensorType &w = *ctx.in(1);
    ctx.requireDType(w, DType::F32, "input W");
    if (w.shape.size() != rank || w.shape[0] != m ||
        w.shape[1] != x.shape[1] / a.group)
      throw Error(fmt::format("W {} does not fit x {}, dy {} and group {}",
                              w.str(), x.str(), dy.str(), a.group));
    kernel.assign(w.shape.begin() + 2, w.shape.end());
  } else {
    ctx.attrs.require("kernel_shape");
    kernel = readList(ctx.attrs, "kernel_shape", rank - 2, 1, 1,
                      "one per spatial dimension of x");
  }
  a.window = readWindow(ctx.attrs, rank - 2, kernel, true, false);
  Shape expect = windowOutputShape(x.shape, m, a.window);
  if (dy.shape != expect)
    throw Error(fmt::format("dy must be {} for x {}, got {}",
                            formatShape(expect), x.str(), dy.str()));
  if (input) {
    ctx.expected.push_back(x);
    return;
  }
  wShape.insert(wShape.end(), kernel.begin(), kernel.end());
  ctx.expected.push_back({DType::F32, wShape});
}

/// MaxPoolGrad(x, dy), AveragePoolGrad(x, dy).
void shoal::rt::poolGradRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  const TensorType &dy = *ctx.in(1);
  OpAttrs &a = ctx.a();
  ctx.requireDType(x, DType::F32, "input x");
  ctx.requireDType(dy, DType::F32, "input dy");
  std::size_t rank = x.shape.size();
  if (rank < 3)
    throw Error(fmt::format("input x must be [N, C, spatial...] with at "
                            "least one spatial dimension, got {}",
                            x.str()));
  ctx.attrs.require("kernel_shape");
  std::vector<int64_t> kernel = readList(ctx.attrs, "kernel_shape", rank - 2, 1,
                                         1, "one per spatial dimension of x");
  bool isMax = ctx.kind() == OpKind::MaxPoolGrad;
  a.window = readWindow(ctx.attrs, rank - 2, kernel, isMax, true);
  if (!isMax)
    a.countIncludePad = ctx.attrs.getBool("count_include_pad", false);
  Shape expect = windowOutputShape(x.shape, x.shape[1], a.window);
  if (dy.shape != expect)
    throw Error(fmt::format("dy must be {} for x {}, got {}",
                            formatShape(expect), x.str(), dy.str()));
  ctx.expected.push_back(x);
}
