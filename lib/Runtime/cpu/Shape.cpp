//===- Shape.cpp - CPU kernels: shapes and data movement --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the shapes and data movement family of Ops.def
// (Kernels.h): Transpose, Concat, Split, Slice, Expand, Pad, Trilu, Tile and
// Resize (Reshape aliases its input), then their registration per op.
//
//===----------------------------------------------------------------------===//

#include "cpu/Common.h"
#include "cpu/Kernels.h"
#include "cpu/Registry.h"

#include "PlanLoader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

namespace {
/// The multi-index of output row `row` (every output dimension but the
/// last), and the input offset it starts at.
int64_t rowOffset(int64_t row, const Shape &outShape,
                  const std::vector<int64_t> &strides, std::size_t outerRank,
                  std::vector<int64_t> &idx) {
  int64_t off = 0;
  for (std::size_t d = outerRank; d-- > 0;) {
    idx[d] = row % outShape[d];
    row /= outShape[d];
    off += idx[d] * strides[d];
  }
  return off;
}

/// Steps `idx` (over the first `outerRank` output dimensions) to the next
/// row; `off` follows (past the last row, both wrap to the first).
void nextRow(std::vector<int64_t> &idx, int64_t &off, const Shape &outShape,
             const std::vector<int64_t> &strides, std::size_t outerRank) {
  for (std::size_t d = outerRank; d-- > 0;) {
    ++idx[d];
    off += strides[d];
    if (idx[d] < outShape[d])
      return;
    off -= strides[d] * outShape[d];
    idx[d] = 0;
  }
}

/// out = x transposed by `perm`, split over the threads. When the output's
/// last dimension is not the input's (a strided read), the input's last
/// dimension and the output's are transposed in tiles that stay in cache,
/// as a 2-D transpose does.
template <typename T>
void transposeTyped(const T *src, const Shape &inShape,
                    const std::vector<int64_t> &perm, T *dst,
                    const Shape &outShape) {
  std::size_t rank = perm.size();
  std::vector<int64_t> inStrides(rank);
  int64_t acc = 1;
  for (std::size_t d = rank; d-- > 0;) {
    inStrides[d] = acc;
    acc *= inShape[d];
  }
  // Stride in the input of each output dimension.
  std::vector<int64_t> strides(rank);
  for (std::size_t d = 0; d < rank; ++d)
    strides[d] = inStrides[perm[d]];
  int64_t n = rank ? outShape[rank - 1] : 1;
  int64_t innerStride = rank ? strides[rank - 1] : 1;
  std::size_t outerRank = rank ? rank - 1 : 0;
  int64_t rows = n ? numElements(outShape) / n : 0;
  // The output dimension that is the input's last (contiguous) one.
  std::size_t p = rank;
  for (std::size_t d = 0; d + 1 < rank; ++d)
    if (strides[d] == 1 && outShape[d] > 1)
      p = d;
  if (innerStride == 1 || p == rank || n < 8) {
    // Rows of the output, each a copy or a strided gather.
    parallelFor(rows, n + 16, [&](int64_t r0, int64_t r1) {
      std::vector<int64_t> idx(outerRank, 0);
      int64_t off = rowOffset(r0, outShape, strides, outerRank, idx);
      for (int64_t r = r0; r < r1; ++r) {
        T *out = dst + r * n;
        if (innerStride == 1)
          std::memcpy(out, src + off, n * sizeof(T));
        else
          for (int64_t i = 0; i < n; ++i)
            out[i] = src[off + i * innerStride];
        nextRow(idx, off, outShape, strides, outerRank);
      }
    });
    return;
  }
  // Output dimension p (input-contiguous, size a) against the output's last
  // (size n, input stride innerStride): tiles of kTile x kTile, for every
  // index of the other dimensions.
  constexpr int64_t kTile = 16;
  int64_t a = outShape[p];
  int64_t outStrideP = 1;
  for (std::size_t d = p + 1; d < rank; ++d)
    outStrideP *= outShape[d];
  int64_t planes = rows / a;
  int64_t tilesA = (a + kTile - 1) / kTile, tilesN = (n + kTile - 1) / kTile;
  int64_t tiles = tilesA * tilesN;
  parallelFor(planes * tiles, kTile * kTile, [&](int64_t t0, int64_t t1) {
    std::vector<int64_t> idx(outerRank, 0);
    int64_t plane = -1, off = 0, base = 0;
    for (int64_t t = t0; t < t1; ++t) {
      if (t / tiles != plane) {
        // The plane's input offset and output start (dimension p at 0).
        plane = t / tiles;
        int64_t rest = plane;
        off = 0;
        base = 0;
        int64_t outStride = n;
        for (std::size_t d = outerRank; d-- > 0;) {
          if (d != p) {
            idx[d] = rest % outShape[d];
            rest /= outShape[d];
          } else {
            idx[d] = 0;
          }
          off += idx[d] * strides[d];
          base += idx[d] * outStride;
          outStride *= outShape[d];
        }
      }
      int64_t ta = (t % tiles) / tilesN * kTile,
              tn = (t % tiles) % tilesN * kTile;
      int64_t ea = std::min(a, ta + kTile), en = std::min(n, tn + kTile);
      for (int64_t i = ta; i < ea; ++i) {
        T *out = dst + base + i * outStrideP;
        const T *in = src + off + i;
        for (int64_t j = tn; j < en; ++j)
          out[j] = in[j * innerStride];
      }
    }
  });
}
} // namespace

void shoal::rt::cpu::transpose(const Tensor &x,
                               const std::vector<int64_t> &perm, Tensor &out) {
  if (perm.size() != x.shape().size())
    throw Error(fmt::format("Transpose: perm has {} entries for a rank-{} "
                            "input",
                            perm.size(), x.rank()));
  checkOutput(out, x.dtype(), transposeShape(x.shape(), perm), "Transpose");
  if (x.numElements() == 0)
    return;
  switch (dtypeSize(x.dtype())) {
  case 1:
    return transposeTyped(x.bytes(), x.shape(), perm, out.bytes(), out.shape());
  case 2:
    return transposeTyped(static_cast<const uint16_t *>(x.rawData()), x.shape(),
                          perm, static_cast<uint16_t *>(out.rawData()),
                          out.shape());
  case 4:
    return transposeTyped(static_cast<const uint32_t *>(x.rawData()), x.shape(),
                          perm, static_cast<uint32_t *>(out.rawData()),
                          out.shape());
  default:
    return transposeTyped(static_cast<const uint64_t *>(x.rawData()), x.shape(),
                          perm, static_cast<uint64_t *>(out.rawData()),
                          out.shape());
  }
}

void shoal::rt::cpu::concat(const std::vector<const Tensor *> &inputs,
                            int64_t axis, Tensor &out) {
  if (inputs.empty())
    throw Error("Concat needs at least one input");
  std::vector<Shape> shapes;
  for (const Tensor *t : inputs) {
    if (t->dtype() != inputs[0]->dtype())
      throw Error(fmt::format("Concat: inputs have different dtypes ({} and "
                              "{})",
                              inputs[0]->type().str(), t->type().str()));
    shapes.push_back(t->shape());
  }
  Shape shape = concatShape(shapes, axis);
  checkOutput(out, inputs[0]->dtype(), shape, "Concat");
  std::size_t esz = dtypeSize(out.dtype());
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  std::vector<std::size_t> chunk;
  for (const Shape &s : shapes)
    chunk.push_back(static_cast<std::size_t>(
                        numElements(Shape(s.begin() + axis, s.end()))) *
                    esz);
  uint8_t *dst = out.bytes();
  for (int64_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (chunk[i])
        std::memcpy(dst, inputs[i]->bytes() + o * chunk[i], chunk[i]);
      dst += chunk[i];
    }
}

void shoal::rt::cpu::split(const Tensor &x, int64_t axis,
                           const std::vector<int64_t> &sizes,
                           const std::vector<Tensor *> &outs) {
  const Shape &s = x.shape();
  if (axis < 0 || axis >= x.rank())
    throw Error(fmt::format("Split: axis {} is out of range for {}", axis,
                            x.type().str()));
  if (sizes.size() != outs.size())
    throw Error(fmt::format("Split: {} sizes for {} outputs", sizes.size(),
                            outs.size()));
  int64_t total = 0;
  for (int64_t v : sizes) {
    if (v < 0)
      throw Error(fmt::format("Split: negative size {}", v));
    total += v;
  }
  if (total != s[axis])
    throw Error(fmt::format("Split: sizes add up to {}, but axis {} of {} has "
                            "{}",
                            total, axis, x.type().str(), s[axis]));
  std::size_t esz = dtypeSize(x.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  std::size_t rowBytes = static_cast<std::size_t>(s[axis] * inner) * esz;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    std::size_t chunk = static_cast<std::size_t>(sizes[i] * inner) * esz;
    if (outs[i]) {
      Shape os = s;
      os[axis] = sizes[i];
      checkOutput(*outs[i], x.dtype(), os, "Split");
      uint8_t *dst = outs[i]->bytes();
      for (int64_t o = 0; o < outer && chunk; ++o)
        std::memcpy(dst + o * chunk, x.bytes() + o * rowBytes + offset, chunk);
    }
    offset += chunk;
  }
}

void shoal::rt::cpu::slice(const Tensor &x, const std::vector<int64_t> &first,
                           const std::vector<int64_t> &step, Tensor &out) {
  const Shape &in = x.shape();
  const Shape &os = out.shape();
  std::size_t rank = in.size();
  if (first.size() != rank || step.size() != rank || out.dtype() != x.dtype() ||
      os.size() != rank)
    throw Error(fmt::format("Slice: output {} does not fit input {}",
                            out.type().str(), x.type().str()));
  // Every element read must lie inside the input.
  for (std::size_t d = 0; d < rank; ++d) {
    if (os[d] == 0)
      continue;
    int64_t last = first[d] + (os[d] - 1) * step[d];
    if (first[d] < 0 || first[d] >= in[d] || last < 0 || last >= in[d])
      throw Error(fmt::format("Slice: {} elements from {} by {} do not fit "
                              "dimension {} of size {}",
                              os[d], first[d], step[d], d, in[d]));
  }
  if (out.numElements() == 0)
    return;
  std::vector<int64_t> is = rowMajorStrides(in);
  int64_t base = 0;
  std::vector<int64_t> st(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    base += first[d] * is[d];
    st[d] = step[d] * is[d];
  }
  byElementSize(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *src = static_cast<const T *>(x.rawData());
    T *dst = static_cast<T *>(out.rawData());
    if (rank == 0) {
      dst[0] = src[0];
      return;
    }
    std::size_t inner = rank - 1;
    int64_t n = os[inner], sInner = st[inner];
    std::vector<int64_t> idx(inner, 0);
    int64_t off = base;
    while (true) {
      if (sInner == 1)
        std::memcpy(dst, src + off, n * sizeof(T));
      else
        for (int64_t i = 0; i < n; ++i)
          dst[i] = src[off + i * sInner];
      dst += n;
      std::size_t d = inner;
      while (d-- > 0) {
        ++idx[d];
        off += st[d];
        if (idx[d] < os[d])
          break;
        off -= st[d] * os[d];
        idx[d] = 0;
      }
      if (d == static_cast<std::size_t>(-1))
        break;
    }
  });
}

void shoal::rt::cpu::expand(const Tensor &x, Tensor &out) {
  if (out.dtype() != x.dtype() || !broadcastsTo(x.shape(), out.shape()))
    throw Error(fmt::format("Expand: input {} does not broadcast to the "
                            "output {}",
                            x.type().str(), out.type().str()));
  byElementSize(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *src = static_cast<const T *>(x.rawData());
    T *dst = static_cast<T *>(out.rawData());
    forEachBroadcast<1>({&x.shape()}, out.shape(),
                        [&](const std::array<int64_t, 1> &off, int64_t oo,
                            int64_t n, const std::array<int64_t, 1> &s) {
                          if (s[0] == 1)
                            std::memcpy(dst + oo, src + off[0], n * sizeof(T));
                          else
                            for (int64_t i = 0; i < n; ++i)
                              dst[oo + i] = src[off[0] + i * s[0]];
                        });
  });
}

void shoal::rt::cpu::pad(const Tensor &x, const std::vector<int64_t> &pads,
                         PadMode mode, double value, Tensor &out) {
  const Shape &in = x.shape();
  std::size_t rank = in.size();
  if (pads.size() != 2 * rank)
    throw Error(
        fmt::format("Pad: {} pads for a rank-{} input", pads.size(), rank));
  Shape shape(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    shape[d] = in[d] + pads[d] + pads[d + rank];
    if (shape[d] < 0)
      throw Error(fmt::format("Pad: pads {} and {} crop more than dimension "
                              "{} of size {}",
                              pads[d], pads[d + rank], d, in[d]));
    if (mode != PadMode::Constant && in[d] == 0 && shape[d] > 0)
      throw Error(fmt::format("Pad: cannot pad the empty dimension {} in "
                              "{} mode",
                              d, mode == PadMode::Edge ? "edge" : "reflect"));
  }
  checkOutput(out, x.dtype(), shape, "Pad");
  if (out.numElements() == 0)
    return;
  // Source index of every output index along every dimension; -1 is the
  // constant.
  std::vector<std::vector<int64_t>> src(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    src[d].resize(shape[d]);
    for (int64_t o = 0; o < shape[d]; ++o) {
      int64_t i = o - pads[d], n = in[d];
      if (i < 0 || i >= n) {
        if (mode == PadMode::Constant) {
          i = -1;
        } else if (mode == PadMode::Edge) {
          i = i < 0 ? 0 : n - 1;
        } else if (n == 1) {
          i = 0;
        } else {
          int64_t period = 2 * (n - 1);
          i = ((i % period) + period) % period;
          if (i >= n)
            i = period - i;
        }
      }
      src[d][o] = i;
    }
  }
  std::vector<int64_t> is = rowMajorStrides(in);
  auto fill = [&](auto tag) {
    using T = typename decltype(tag)::type;
    T c = narrow<T>(value);
    const T *px = static_cast<const T *>(x.rawData());
    T *po = static_cast<T *>(out.rawData());
    if (rank == 0) {
      po[0] = px[0];
      return;
    }
    std::size_t inner = rank - 1;
    int64_t n = shape[inner];
    const std::vector<int64_t> &srcInner = src[inner];
    std::vector<int64_t> idx(inner, 0);
    while (true) {
      bool constant = false;
      int64_t base = 0;
      for (std::size_t d = 0; d < inner; ++d) {
        int64_t i = src[d][idx[d]];
        if (i < 0)
          constant = true;
        base += i * is[d];
      }
      for (int64_t j = 0; j < n; ++j) {
        int64_t i = srcInner[j];
        po[j] = constant || i < 0 ? c : px[base + i];
      }
      po += n;
      std::size_t d = inner;
      while (d-- > 0) {
        if (++idx[d] < shape[d])
          break;
        idx[d] = 0;
      }
      if (d == static_cast<std::size_t>(-1))
        break;
    }
  };
  visitDType(x.dtype(), fill);
}

void shoal::rt::cpu::trilu(const Tensor &x, bool upper, int64_t k,
                           Tensor &out) {
  const Shape &s = x.shape();
  int64_t rows = s[s.size() - 2], cols = s[s.size() - 1];
  std::size_t elem = dtypeSize(x.dtype());
  const uint8_t *src = static_cast<const uint8_t *>(x.rawData());
  uint8_t *dst = static_cast<uint8_t *>(out.rawData());
  for (int64_t i = 0, n = x.numElements(); i < n; ++i) {
    int64_t col = i % cols, row = (i / cols) % rows;
    bool keep = upper ? col - row >= k : col - row <= k;
    if (keep)
      std::memcpy(dst + i * elem, src + i * elem, elem);
    else
      std::memset(dst + i * elem, 0, elem);
  }
}

void shoal::rt::cpu::tile(const Tensor &x, const std::vector<int64_t> &repeats,
                          Tensor &out) {
  const Shape &in = x.shape();
  std::size_t rank = in.size();
  if (repeats.size() != rank)
    throw Error(fmt::format("Tile: {} repeats for a rank-{} input",
                            repeats.size(), rank));
  Shape shape = in;
  for (std::size_t d = 0; d < rank; ++d)
    shape[d] *= repeats[d];
  checkOutput(out, x.dtype(), shape, "Tile");
  if (out.numElements() == 0)
    return;
  std::size_t elem = dtypeSize(x.dtype());
  const uint8_t *src = static_cast<const uint8_t *>(x.rawData());
  uint8_t *dst = static_cast<uint8_t *>(out.rawData());
  if (rank == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  // Every output row (the last dimension) is the input row it comes from,
  // repeated.
  std::vector<int64_t> is = rowMajorStrides(in);
  std::size_t inner = rank - 1;
  std::size_t row = static_cast<std::size_t>(in[inner]) * elem;
  std::vector<int64_t> idx(inner, 0);
  while (true) {
    int64_t base = 0;
    for (std::size_t d = 0; d < inner; ++d)
      base += (idx[d] % in[d]) * is[d];
    for (int64_t r = 0; r < repeats[inner]; ++r) {
      std::memcpy(dst, src + base * elem, row);
      dst += row;
    }
    std::size_t d = inner;
    while (d-- > 0) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1))
      break;
  }
}

//===----------------------------------------------------------------------===//
// Resize
//===----------------------------------------------------------------------===//

namespace {

/// One input element an output coordinate reads along one dimension.
struct ResizeTap {
  int64_t index;
  double weight;
};

/// The taps (one for nearest or an integral coordinate, else two) of every
/// output coordinate of one dimension, as ONNX's reference computes them:
/// the input coordinate from the transform, then the nearest element or
/// the two neighbours, clamped to the input (edge padding).
std::vector<std::vector<ResizeTap>> resizeTaps(int64_t inSize, int64_t outSize,
                                               double scale,
                                               const ResizeParams &p) {
  using T = ResizeParams::Transform;
  using N = ResizeParams::Nearest;
  // ONNX's reference uses the scaled length, which differs from outSize
  // when a given scale does not divide evenly.
  double outLength = scale * static_cast<double>(inSize);
  auto clampIndex = [&](int64_t i) {
    return std::min<int64_t>(std::max<int64_t>(i, 0), inSize - 1);
  };
  std::vector<std::vector<ResizeTap>> taps(outSize);
  for (int64_t o = 0; o < outSize; ++o) {
    double x = static_cast<double>(o), src = 0;
    switch (p.transform) {
    case T::HalfPixel:
      src = (x + 0.5) / scale - 0.5;
      break;
    case T::PytorchHalfPixel:
      src = outLength == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
      break;
    case T::AlignCorners:
      src = outLength == 1 ? 0 : x * (inSize - 1) / (outLength - 1);
      break;
    case T::Asymmetric:
      src = x / scale;
      break;
    case T::TfHalfPixelForNN:
      src = (x + 0.5) / scale;
      break;
    }
    double fl = std::floor(src);
    int64_t base = static_cast<int64_t>(fl);
    double ratio = src - fl;
    if (ratio == 0) {
      taps[o].push_back({clampIndex(base), 1.0});
      continue;
    }
    if (!p.linear) {
      bool up = false;
      switch (p.nearest) {
      case N::RoundPreferFloor:
        up = ratio > 0.5;
        break;
      case N::RoundPreferCeil:
        up = ratio >= 0.5;
        break;
      case N::Floor:
        up = false;
        break;
      case N::Ceil:
        up = true;
        break;
      }
      taps[o].push_back({clampIndex(base + (up ? 1 : 0)), 1.0});
      continue;
    }
    taps[o].push_back({clampIndex(base), 1.0 - ratio});
    taps[o].push_back({clampIndex(base + 1), ratio});
  }
  return taps;
}

/// Calls body(outOffset, inOffset, weight) for every (output element,
/// input tap) pair of a resize from `in` to `out`.
template <typename Body>
void forEachResizeTap(const Shape &in, const Shape &out, const ResizeParams &p,
                      Body body) {
  std::size_t rank = in.size();
  std::vector<std::vector<std::vector<ResizeTap>>> taps(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    double scale = p.scales.empty() ? static_cast<double>(out[d]) /
                                          static_cast<double>(in[d])
                                    : p.scales[d];
    taps[d] = resizeTaps(in[d], out[d], scale, p);
  }
  std::vector<int64_t> is = rowMajorStrides(in);
  int64_t n = numElements(out);
  if (n == 0 || numElements(in) == 0)
    return;
  std::vector<int64_t> idx(rank, 0);
  // Per dimension, the partial (offset, weight) products of the taps chosen
  // so far; depth-first over the dimensions.
  std::vector<const std::vector<ResizeTap> *> cur(rank);
  for (int64_t o = 0; o < n; ++o) {
    for (std::size_t d = 0; d < rank; ++d)
      cur[d] = &taps[d][idx[d]];
    auto visit = [&](auto &self, std::size_t d, int64_t off, double w) -> void {
      if (d == rank) {
        body(o, off, w);
        return;
      }
      for (const ResizeTap &t : *cur[d])
        self(self, d + 1, off + t.index * is[d], w * t.weight);
    };
    visit(visit, 0, 0, 1.0);
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < out[d])
        break;
      idx[d] = 0;
    }
  }
}

template <typename E>
void resizeTyped(const Tensor &x, const ResizeParams &p, Tensor &out) {
  const E *src = x.data<E>();
  E *dst = out.data<E>();
  std::fill(dst, dst + out.numElements(), E(0));
  forEachResizeTap(x.shape(), out.shape(), p,
                   [&](int64_t o, int64_t i, double w) {
                     dst[o] += static_cast<E>(w * src[i]);
                   });
}

template <typename E>
void resizeGradTyped(const Tensor &dy, const ResizeParams &p, Tensor &out) {
  const E *g = dy.data<E>();
  E *dst = out.data<E>();
  std::fill(dst, dst + out.numElements(), E(0));
  forEachResizeTap(out.shape(), dy.shape(), p,
                   [&](int64_t o, int64_t i, double w) {
                     dst[i] += static_cast<E>(w * g[o]);
                   });
}

} // namespace

namespace {

/// Resize and ResizeGrad: f32 or f64 (half types through f32), same rank.
void runResize(const char *name, const char *input, const Tensor &in,
               const ResizeParams &p, Tensor &out, bool grad) {
  if (isHalfDType(in.dtype())) {
    checkOutput(out, in.dtype(), out.shape(), name);
    Tensor r(DType::F32, out.shape());
    runResize(name, input, toF32(in), p, r, grad);
    return fromF32(r, out);
  }
  if (in.dtype() != DType::F64)
    checkDType(in, DType::F32, name, input);
  checkOutput(out, in.dtype(), out.shape(), name);
  if (out.rank() != in.rank())
    throw Error(fmt::format("{}: output {} and input {} differ in rank", name,
                            out.type().str(), in.type().str()));
  if (in.dtype() == DType::F64)
    grad ? resizeGradTyped<double>(in, p, out)
         : resizeTyped<double>(in, p, out);
  else
    grad ? resizeGradTyped<float>(in, p, out) : resizeTyped<float>(in, p, out);
}

} // namespace

void shoal::rt::cpu::resize(const Tensor &x, const ResizeParams &p,
                            Tensor &out) {
  runResize("Resize", "X", x, p, out, /*grad=*/false);
}

void shoal::rt::cpu::resizeGrad(const Tensor &dy, const ResizeParams &p,
                                Tensor &out) {
  runResize("ResizeGrad", "dY", dy, p, out, /*grad=*/true);
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

namespace {

SHOAL_CPU_KERNEL(reshapeKernel) {
  // Shares the input's buffer.
  out[0] = Tensor::alias(input(in, 0), ctx.plan.values[op.outputs[0]].shape);
}

SHOAL_CPU_KERNEL(transposeKernel) {
  transpose(input(in, 0), op.attrs.perm, out[0]);
}

SHOAL_CPU_KERNEL(concatKernel) {
  std::vector<const Tensor *> all;
  for (std::size_t i = 0; i < in.size(); ++i)
    all.push_back(&input(in, i));
  concat(all, op.attrs.axis, out[0]);
}

SHOAL_CPU_KERNEL(splitKernel) {
  std::vector<Tensor *> parts;
  for (std::size_t i = 0; i < out.size(); ++i)
    parts.push_back(optionalOutput(out, i));
  split(input(in, 0), op.attrs.axis, op.attrs.split, parts);
}

SHOAL_CPU_KERNEL(sliceKernel) {
  slice(input(in, 0), op.attrs.starts, op.attrs.steps, out[0]);
}

SHOAL_CPU_KERNEL(expandKernel) { expand(input(in, 0), out[0]); }

SHOAL_CPU_KERNEL(padKernel) {
  const OpAttrs &a = op.attrs;
  pad(input(in, 0), a.pads, a.padMode, a.padValue, out[0]);
}

SHOAL_CPU_KERNEL(triluKernel) {
  trilu(input(in, 0), op.attrs.upper, op.attrs.k, out[0]);
}

SHOAL_CPU_KERNEL(tileKernel) { tile(input(in, 0), op.attrs.repeats, out[0]); }

SHOAL_CPU_KERNEL(resizeKernel) {
  resize(input(in, 0), op.attrs.resize, out[0]);
}

SHOAL_CPU_KERNEL(resizeGradKernel) {
  resizeGrad(input(in, 0), op.attrs.resize, out[0]);
}

} // namespace

void shoal::rt::cpu::registerShapeKernels() {
  registerCpuKernel(OpKind::Reshape, reshapeKernel);
  registerCpuKernel(OpKind::Transpose, transposeKernel, KernelWrites::All);
  registerCpuKernel(OpKind::Concat, concatKernel, KernelWrites::All);
  registerCpuKernel(OpKind::Split, splitKernel);
  registerCpuKernel(OpKind::Slice, sliceKernel, KernelWrites::All);
  registerCpuKernel(OpKind::Expand, expandKernel, KernelWrites::All);
  registerCpuKernel(OpKind::Pad, padKernel);
  registerCpuKernel(OpKind::Trilu, triluKernel);
  registerCpuKernel(OpKind::Tile, tileKernel);
  registerCpuKernel(OpKind::Resize, resizeKernel);
  registerCpuKernel(OpKind::ResizeGrad, resizeGradKernel);
}
