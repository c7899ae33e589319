//===- Shape.cpp - Type rules: shapes and data movement ---------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "ops/TypeRules.h"

#include "plan.pb.h"

#include <fmt/format.h>

#include <set>

using namespace shoal;
using namespace shoal::rt;

/// Reshape.
void shoal::rt::reshapeRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.attrs.require("shape");
  a.shape = ctx.attrs.getInts("shape");
  for (int64_t d : a.shape)
    if (d < -1)
      throw Error(fmt::format("attribute 'shape' {} has a negative "
                              "dimension",
                              formatShape(a.shape)));
  // The output value's declared (local) type is authoritative; the
  // attribute must agree with it in rank.
  int outId = ctx.info.outputs[0];
  const TensorType &out = ctx.types[outId];
  if (a.shape.size() != out.shape.size())
    throw Error(fmt::format("attribute 'shape' {} has rank {}, but output "
                            "value {} is {}",
                            formatShape(a.shape), a.shape.size(), outId,
                            out.str()));
  if (out.dtype != x.dtype || out.numElements() != x.numElements())
    throw Error(fmt::format("cannot reshape {} into output value {} of "
                            "type {}",
                            x.str(), outId, out.str()));
  ctx.info.aliasesInput = true;
  ctx.expected.push_back(out);
}

/// Transpose.
void shoal::rt::transposeRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (ctx.attrs.has("perm")) {
    a.perm = ctx.attrs.getInts("perm");
    std::vector<bool> seen(rank, false);
    bool ok = static_cast<int64_t>(a.perm.size()) == rank;
    for (int64_t p : a.perm) {
      if (!ok)
        break;
      if (p < 0 || p >= rank || seen[p])
        ok = false;
      else
        seen[p] = true;
    }
    if (!ok)
      throw Error(fmt::format("perm {} is not a permutation of the {} "
                              "dimensions of the input",
                              formatShape(a.perm), rank));
  } else {
    for (int64_t d = rank - 1; d >= 0; --d)
      a.perm.push_back(d);
  }
  ctx.expected.push_back({x.dtype, transposeShape(x.shape, a.perm)});
}

/// Concat.
void shoal::rt::concatRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.attrs.require("axis");
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0)
    throw Error("inputs must have rank >= 1");
  a.axis = normalizeAxis(ctx.attrs.getInt("axis", 0), rank, "axis");
  std::vector<Shape> shapes;
  for (std::size_t i = 0; i < ctx.info.inputs.size(); ++i) {
    if (ctx.in(i)->dtype != x.dtype)
      throw Error(
          fmt::format("inputs have different dtypes ({})", ctx.typesStr()));
    shapes.push_back(ctx.in(i)->shape);
  }
  ctx.expected.push_back({x.dtype, concatShape(shapes, a.axis)});
}

/// Split.
void shoal::rt::splitRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0)
    throw Error("input must have rank >= 1");
  a.axis = normalizeAxis(ctx.attrs.getInt("axis", 0), rank, "axis");
  int64_t dim = x.shape[a.axis];
  int64_t n = static_cast<int64_t>(ctx.info.outputs.size());
  if (ctx.attrs.has("split")) {
    a.split = ctx.attrs.getInts("split");
    if (static_cast<int64_t>(a.split.size()) != n)
      throw Error(fmt::format("attribute 'split' {} has {} entries for {} "
                              "outputs",
                              formatShape(a.split), a.split.size(), n));
    int64_t total = 0;
    for (int64_t v : a.split) {
      if (v < 0)
        throw Error(fmt::format("attribute 'split' {} has a negative size",
                                formatShape(a.split)));
      total += v;
    }
    if (total != dim)
      throw Error(fmt::format("attribute 'split' {} adds up to {}, but axis "
                              "{} of the input {} has size {}",
                              formatShape(a.split), total, a.axis, x.str(),
                              dim));
  } else {
    if (dim % n != 0)
      throw Error(fmt::format("axis {} of the input {} (size {}) does not "
                              "split into {} equal parts; give 'split'",
                              a.axis, x.str(), dim, n));
    a.split.assign(n, dim / n);
  }
  for (int64_t v : a.split) {
    Shape shape = x.shape;
    shape[a.axis] = v;
    ctx.expected.push_back({x.dtype, shape});
  }
}

/// Slice.
void shoal::rt::sliceRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.attrs.require("starts");
  ctx.attrs.require("ends");
  Shape shape = sliceShape(x.shape, ctx.attrs.getInts("starts"),
                           ctx.attrs.getInts("ends"), ctx.attrs.getInts("axes"),
                           ctx.attrs.getInts("steps"), a.starts, a.steps);
  ctx.expected.push_back({x.dtype, shape});
}

/// Expand.
void shoal::rt::expandRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  if (ctx.attrs.has("shape")) {
    a.shape = ctx.attrs.getInts("shape");
    for (int64_t d : a.shape)
      if (d < 0)
        throw Error(fmt::format("attribute 'shape' {} has a negative "
                                "dimension",
                                formatShape(a.shape)));
    Shape shape;
    try {
      shape = broadcastShape(x.shape, a.shape);
    } catch (const Error &) {
      throw Error(fmt::format("input {} does not broadcast to attribute "
                              "'shape' {}",
                              x.str(), formatShape(a.shape)));
    }
    ctx.expected.push_back({x.dtype, shape});
    return;
  }
  // Without the attribute the output value's declared type gives the
  // shape.
  const TensorType &out = ctx.types[ctx.info.outputs[0]];
  if (!broadcastsTo(x.shape, out.shape))
    throw Error(fmt::format("input {} does not broadcast to output value {} "
                            "of type {}",
                            x.str(), ctx.info.outputs[0], out.str()));
  ctx.expected.push_back({x.dtype, out.shape});
}

/// Pad.
void shoal::rt::padRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.attrs.require("pads");
  int64_t rank = static_cast<int64_t>(x.shape.size());
  std::string mode = ctx.attrs.getString("mode", "constant");
  if (mode == "constant")
    a.padMode = PadMode::Constant;
  else if (mode == "reflect")
    a.padMode = PadMode::Reflect;
  else if (mode == "edge")
    a.padMode = PadMode::Edge;
  else
    throw Error(fmt::format("mode '{}' is not supported (constant, reflect "
                            "or edge)",
                            mode));
  a.padValue = ctx.attrs.getFloat("constant_value", 0.f);
  std::vector<int64_t> axes;
  if (ctx.attrs.has("axes")) {
    std::set<int64_t> seen;
    for (int64_t ax : ctx.attrs.getInts("axes")) {
      int64_t n = normalizeAxis(ax, rank, "pad axis");
      if (!seen.insert(n).second)
        throw Error(fmt::format("pad axis {} is listed twice", ax));
      axes.push_back(n);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  std::vector<int64_t> pads = ctx.attrs.getInts("pads");
  if (pads.size() != 2 * axes.size())
    throw Error(fmt::format("attribute 'pads' {} has {} entries, expected {} "
                            "(the begin of every padded axis, then the "
                            "ends)",
                            formatShape(pads), pads.size(), 2 * axes.size()));
  a.pads.assign(2 * rank, 0);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    a.pads[axes[i]] = pads[i];
    a.pads[axes[i] + rank] = pads[i + axes.size()];
  }
  Shape shape = x.shape;
  for (int64_t d = 0; d < rank; ++d) {
    shape[d] += a.pads[d] + a.pads[d + rank];
    if (shape[d] < 0)
      throw Error(fmt::format("pads {} and {} crop more than dimension {} "
                              "of the input {}",
                              a.pads[d], a.pads[d + rank], d, x.str()));
    if (a.padMode != PadMode::Constant && x.shape[d] == 0 && shape[d] > 0)
      throw Error(fmt::format("cannot pad the empty dimension {} of the "
                              "input {} in {} mode",
                              d, x.str(), mode));
  }
  ctx.expected.push_back({x.dtype, shape});
}

/// Trilu.
void shoal::rt::triluRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  if (x.shape.size() < 2)
    throw Error(fmt::format("input must have rank >= 2, got {}", x.str()));
  a.upper = ctx.attrs.getBool("upper", true);
  a.k = ctx.attrs.getInt("k", 0);
  ctx.expected.push_back(x);
}

/// Tile.
void shoal::rt::tileRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.attrs.require("repeats");
  a.repeats = ctx.attrs.getInts("repeats");
  if (a.repeats.size() != x.shape.size())
    throw Error(fmt::format("attribute 'repeats' {} has {} entries for the "
                            "input {} of rank {}",
                            formatShape(a.repeats), a.repeats.size(), x.str(),
                            x.shape.size()));
  Shape shape = x.shape;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (a.repeats[d] < 0)
      throw Error(fmt::format("attribute 'repeats' {} has a negative entry",
                              formatShape(a.repeats)));
    shape[d] *= a.repeats[d];
  }
  ctx.expected.push_back({x.dtype, shape});
}

/// Resize and ResizeGrad. The output's shape is its declared type (the
/// importer took it from ONNX's shape inference); the rule checks that it
/// agrees with the input's where the scale is 1. For ResizeGrad the input
/// is the gradient of Resize's output and the output has Resize's input
/// shape.
void shoal::rt::resizeRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  ResizeParams &p = ctx.a().resize;
  ctx.requireFloat(x, "input", /*f64=*/true);
  std::string mode = ctx.attrs.getString("mode", "nearest");
  if (mode != "nearest" && mode != "linear")
    throw Error(
        fmt::format("attribute 'mode' is '{}' (nearest or linear)", mode));
  p.linear = mode == "linear";
  std::string transform =
      ctx.attrs.getString("coordinate_transformation_mode", "half_pixel");
  using T = ResizeParams::Transform;
  if (transform == "half_pixel")
    p.transform = T::HalfPixel;
  else if (transform == "pytorch_half_pixel")
    p.transform = T::PytorchHalfPixel;
  else if (transform == "align_corners")
    p.transform = T::AlignCorners;
  else if (transform == "asymmetric")
    p.transform = T::Asymmetric;
  else if (transform == "tf_half_pixel_for_nn")
    p.transform = T::TfHalfPixelForNN;
  else
    throw Error(fmt::format("attribute 'coordinate_transformation_mode' is "
                            "'{}' (half_pixel, pytorch_half_pixel, "
                            "align_corners, asymmetric or "
                            "tf_half_pixel_for_nn)",
                            transform));
  std::string nearest =
      ctx.attrs.getString("nearest_mode", "round_prefer_floor");
  using N = ResizeParams::Nearest;
  if (nearest == "round_prefer_floor")
    p.nearest = N::RoundPreferFloor;
  else if (nearest == "round_prefer_ceil")
    p.nearest = N::RoundPreferCeil;
  else if (nearest == "floor")
    p.nearest = N::Floor;
  else if (nearest == "ceil")
    p.nearest = N::Ceil;
  else
    throw Error(fmt::format("attribute 'nearest_mode' is '{}' "
                            "(round_prefer_floor, round_prefer_ceil, floor "
                            "or ceil)",
                            nearest));
  p.scales = ctx.attrs.getFloats("scales");
  const TensorType &out = ctx.declaredOutput(0);
  if (out.shape.size() != x.shape.size())
    throw Error(fmt::format("output {} and input {} differ in rank", out.str(),
                            x.str()));
  if (!p.scales.empty() && p.scales.size() != x.shape.size())
    throw Error(fmt::format("attribute 'scales' has {} entries for rank {}",
                            p.scales.size(), x.shape.size()));
  for (std::size_t d = 0; d < p.scales.size(); ++d) {
    if (!(p.scales[d] > 0))
      throw Error(fmt::format("scale {} of dimension {} is not positive",
                              p.scales[d], d));
    if (p.scales[d] == 1 && out.shape[d] != x.shape[d])
      throw Error(fmt::format("dimension {} has scale 1 but sizes {} and {}", d,
                              x.shape[d], out.shape[d]));
  }
  ctx.expected.push_back({x.dtype, out.shape});
}
