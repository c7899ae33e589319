//===- ConvPool.cpp - CPU kernels: convolution and pooling ------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the convolution and pooling family of Ops.def
// (Kernels.h): Conv (im2col and BLAS), MaxPool, AveragePool and the
// global pools, then their registration per op.
//
//===----------------------------------------------------------------------===//

#include "cpu/Common.h"
#include "cpu/Kernels.h"
#include "cpu/Registry.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

using namespace shoal::rt;
using namespace shoal::rt::cpu;

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// C (m x n, row-major, leading dimension ldc) = op(A) op(B) + beta C,
/// op transposing when asked; A is m x k (or k x m transposed), B k x n (or
/// n x k).
void sgemmT(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
            const float *a, int64_t lda, const float *b, int64_t ldb,
            float beta, float *c, int64_t ldc, const char *what) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0 ? 0.f : beta * c[i * ldc + j];
    return;
  }
  for (int64_t v : {m, n, k, lda, ldb, ldc})
    if (v > INT_MAX)
      throw Error(
          fmt::format("{}: dimension {} is too large for BLAS", what, v));
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), 1.f,
              a, int(std::max<int64_t>(lda, 1)), b,
              int(std::max<int64_t>(ldb, 1)), beta, c,
              int(std::max<int64_t>(ldc, 1)));
}

void sgemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
           const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
           const char *what) {
  sgemmT(false, false, m, n, k, a, lda, b, ldb, beta, c, ldc, what);
}

/// Lays out the windows of `channels` planes of `x` (spatial shape `in`) as
/// a [channels * prod(kernel), prod(outSp)] matrix, zeros where a window
/// reads padding.
void im2col(const float *x, int64_t channels, const Shape &in,
            const Shape &outSp, const WindowParams &w, float *col) {
  std::size_t sr = in.size();
  int64_t kn = numElements(w.kernel), p = numElements(outSp);
  int64_t inPlane = numElements(in);
  if (p == 0)
    return;
  std::vector<int64_t> is = rowMajorStrides(in);
  std::size_t last = sr - 1;
  int64_t outL = outSp[last], inL = in[last], sL = w.strides[last];
  int64_t outer = p / outL;
  Shape outerShape(outSp.begin(), outSp.end() - 1);
  std::vector<int64_t> kc(sr), oc(last);
  for (int64_t c = 0; c < channels; ++c) {
    const float *src = x + c * inPlane;
    for (int64_t kf = 0; kf < kn; ++kf) {
      int64_t r = kf;
      for (std::size_t d = sr; d-- > 0;) {
        kc[d] = r % w.kernel[d];
        r /= w.kernel[d];
      }
      float *dst = col + (c * kn + kf) * p;
      // Output positions along the last dimension that read inside the
      // input: ol * sL + shift in [0, inL).
      int64_t shift = kc[last] * w.dilations[last] - w.pads[last];
      int64_t lo = shift >= 0 ? 0 : ceilDiv(-shift, sL);
      int64_t hi = inL - shift > 0 ? ceilDiv(inL - shift, sL) : 0;
      lo = std::min(lo, outL);
      hi = std::max(lo, std::min(hi, outL));
      std::fill(oc.begin(), oc.end(), 0);
      for (int64_t o = 0; o < outer; ++o, dst += outL) {
        bool inside = true;
        int64_t base = 0;
        for (std::size_t d = 0; d < last; ++d) {
          int64_t i = oc[d] * w.strides[d] - w.pads[d] + kc[d] * w.dilations[d];
          if (i < 0 || i >= in[d])
            inside = false;
          base += i * is[d];
        }
        if (!inside) {
          std::fill(dst, dst + outL, 0.f);
        } else {
          std::fill(dst, dst + lo, 0.f);
          const float *row = src + base;
          if (sL == 1 && hi > lo)
            std::memcpy(dst + lo, row + (lo + shift),
                        (hi - lo) * sizeof(float));
          else if (sL != 1)
            for (int64_t ol = lo; ol < hi; ++ol)
              dst[ol] = row[ol * sL + shift];
          std::fill(dst + hi, dst + outL, 0.f);
        }
        for (std::size_t d = last; d-- > 0;) {
          if (++oc[d] < outerShape[d])
            break;
          oc[d] = 0;
        }
      }
    }
  }
}

/// The adjoint of im2col: adds every entry of `col` ([channels *
/// prod(kernel), prod(outSp)]) into the element of `x` its window reads;
/// entries that read padding are dropped. `x` is not cleared first.
void col2im(const float *col, int64_t channels, const Shape &in,
            const Shape &outSp, const WindowParams &w, float *x) {
  std::size_t sr = in.size();
  int64_t kn = numElements(w.kernel), p = numElements(outSp);
  int64_t inPlane = numElements(in);
  if (p == 0)
    return;
  std::vector<int64_t> is = rowMajorStrides(in);
  std::size_t last = sr - 1;
  int64_t outL = outSp[last], inL = in[last], sL = w.strides[last];
  int64_t outer = p / outL;
  Shape outerShape(outSp.begin(), outSp.end() - 1);
  std::vector<int64_t> kc(sr), oc(last);
  for (int64_t c = 0; c < channels; ++c) {
    float *dst = x + c * inPlane;
    for (int64_t kf = 0; kf < kn; ++kf) {
      int64_t r = kf;
      for (std::size_t d = sr; d-- > 0;) {
        kc[d] = r % w.kernel[d];
        r /= w.kernel[d];
      }
      const float *src = col + (c * kn + kf) * p;
      int64_t shift = kc[last] * w.dilations[last] - w.pads[last];
      int64_t lo = shift >= 0 ? 0 : ceilDiv(-shift, sL);
      int64_t hi = inL - shift > 0 ? ceilDiv(inL - shift, sL) : 0;
      lo = std::min(lo, outL);
      hi = std::max(lo, std::min(hi, outL));
      std::fill(oc.begin(), oc.end(), 0);
      for (int64_t o = 0; o < outer; ++o, src += outL) {
        bool inside = true;
        int64_t base = 0;
        for (std::size_t d = 0; d < last; ++d) {
          int64_t i = oc[d] * w.strides[d] - w.pads[d] + kc[d] * w.dilations[d];
          if (i < 0 || i >= in[d])
            inside = false;
          base += i * is[d];
        }
        if (inside) {
          float *row = dst + base;
          for (int64_t ol = lo; ol < hi; ++ol)
            row[ol * sL + shift] += src[ol];
        }
        for (std::size_t d = last; d-- > 0;) {
          if (++oc[d] < outerShape[d])
            break;
          oc[d] = 0;
        }
      }
    }
  }
}

/// Whether Conv reads X as the im2col matrix itself (1x1 kernel, stride 1,
/// no padding).
bool isDirect(const WindowParams &window) {
  std::size_t sr = window.kernel.size();
  for (std::size_t d = 0; d < sr; ++d)
    if (window.kernel[d] != 1 || window.strides[d] != 1 ||
        window.pads[d] != 0 || window.pads[d + sr] != 0)
      return false;
  return true;
}

} // namespace

void shoal::rt::cpu::conv(const Tensor &x, const Tensor &w, const Tensor *bias,
                          const WindowParams &window, int64_t group,
                          Tensor &out) {
  checkDType(x, DType::F32, "Conv", "X");
  checkDType(w, DType::F32, "Conv", "W");
  const Shape &xs = x.shape(), &ws = w.shape();
  if (xs.size() < 3 || ws.size() != xs.size() || group < 1 ||
      ws[1] * group != xs[1] || ws[0] % group != 0)
    throw Error(fmt::format("Conv: X {} and W {} do not fit with group {}",
                            x.type().str(), w.type().str(), group));
  if (!std::equal(ws.begin() + 2, ws.end(), window.kernel.begin(),
                  window.kernel.end()))
    throw Error(fmt::format("Conv: kernel {} does not match W {}",
                            formatShape(window.kernel), w.type().str()));
  int64_t m = ws[0];
  if (bias) {
    checkDType(*bias, DType::F32, "Conv", "B");
    if (bias->shape() != Shape{m})
      throw Error(fmt::format("Conv: B must be f32[{}], got {}", m,
                              bias->type().str()));
  }
  Shape shape = windowOutputShape(xs, m, window);
  checkOutput(out, DType::F32, shape, "Conv");
  int64_t n = xs[0], c = xs[1], cg = c / group, mg = m / group;
  Shape in(xs.begin() + 2, xs.end()), outSp(shape.begin() + 2, shape.end());
  int64_t inPlane = numElements(in), p = numElements(outSp);
  int64_t kn = numElements(window.kernel);
  bool direct = true; // 1x1 kernel, stride 1, no padding: X is the matrix
  for (std::size_t d = 0; d < in.size(); ++d)
    if (window.kernel[d] != 1 || window.strides[d] != 1 ||
        window.pads[d] != 0 || window.pads[d + in.size()] != 0)
      direct = false;
  std::vector<float> col;
  if (!direct)
    col.resize(static_cast<std::size_t>(cg * kn * p));
  const float *px = x.data<float>();
  const float *pw = w.data<float>();
  const float *pb = bias ? bias->data<float>() : nullptr;
  float *py = out.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < group; ++g) {
      const float *xg = px + (i * c + g * cg) * inPlane;
      const float *mat = xg;
      if (!direct) {
        im2col(xg, cg, in, outSp, window, col.data());
        mat = col.data();
      }
      float *yg = py + (i * m + g * mg) * p;
      if (pb)
        for (int64_t j = 0; j < mg; ++j)
          std::fill(yg + j * p, yg + (j + 1) * p, pb[g * mg + j]);
      sgemm(mg, p, cg * kn, pw + g * mg * cg * kn, cg * kn, mat, p,
            pb ? 1.f : 0.f, yg, p, "Conv");
    }
}

namespace {

/// Along every spatial dimension d and output index o: the first input
/// index the window reads, how many it reads (dilation apart) and, for the
/// average, the divisor's factor.
struct WindowIndex {
  std::vector<std::vector<int64_t>> firstIdx, count, divisor;
};

WindowIndex windowIndex(const Shape &in, const Shape &outSp,
                        const WindowParams &window, bool countIncludePad) {
  std::size_t sr = in.size();
  WindowIndex wi;
  wi.firstIdx.resize(sr);
  wi.count.resize(sr);
  wi.divisor.resize(sr);
  for (std::size_t d = 0; d < sr; ++d) {
    int64_t k = window.kernel[d], s = window.strides[d],
            dil = window.dilations[d], pb = window.pads[d],
            pe = window.pads[d + sr];
    for (int64_t o = 0; o < outSp[d]; ++o) {
      int64_t start = o * s - pb;
      int64_t kLo = start >= 0 ? 0 : ceilDiv(-start, dil);
      int64_t kHi =
          in[d] - start > 0 ? std::min(k, ceilDiv(in[d] - start, dil)) : 0;
      kHi = std::max(kHi, kLo);
      wi.firstIdx[d].push_back(start + kLo * dil);
      wi.count[d].push_back(kHi - kLo);
      // With dilation 1: the window clipped to the padded input.
      int64_t padded = std::min(start + k, in[d] + pe) - std::max(start, -pb);
      wi.divisor[d].push_back(countIncludePad ? padded : kHi - kLo);
    }
  }
  return wi;
}

/// The pooling loop over `planes` planes of spatial shape `in`; along every
/// spatial dimension d and output index o the window reads count[d][o]
/// input indices from firstIdx[d][o], dil[d] apart, and the average divides
/// by the product of divisor[d][o].
template <bool IsMax>
void poolLoop(const float *px, float *py, int64_t planes, const Shape &in,
              const Shape &outSp,
              const std::vector<std::vector<int64_t>> &firstIdx,
              const std::vector<std::vector<int64_t>> &count,
              const std::vector<std::vector<int64_t>> &divisor,
              const std::vector<int64_t> &dil) {
  const float init = IsMax ? -std::numeric_limits<float>::infinity() : 0.f;
  // Branch-free, so that max over unordered data does not mispredict; a
  // NaN in the window makes the max NaN.
  auto take = [](float &acc, bool &nan, float v) {
    if (IsMax) {
      acc = v > acc ? v : acc;
      nan |= v != v;
    } else {
      acc += v;
    }
  };
  auto finish = [](float acc, bool nan, int64_t div) {
    if (IsMax)
      return nan ? std::numeric_limits<float>::quiet_NaN() : acc;
    return div > 0 ? acc / float(div) : 0.f;
  };
  std::size_t sr = in.size();
  int64_t inPlane = numElements(in), outPlane = numElements(outSp);
  if (sr <= 2) {
    // 1-D runs as 2-D with a single row.
    static const std::vector<int64_t> zero = {0}, one = {1};
    bool two = sr == 2;
    int64_t w = in[sr - 1], oh = two ? outSp[0] : 1, ow = outSp[sr - 1];
    const std::vector<int64_t> &fh = two ? firstIdx[0] : zero,
                               &ch = two ? count[0] : one,
                               &dh = two ? divisor[0] : one;
    const std::vector<int64_t> &fw = firstIdx[sr - 1], &cw = count[sr - 1],
                               &dw = divisor[sr - 1];
    int64_t dilH = two ? dil[0] : 1, dilW = dil[sr - 1];
    for (int64_t pl = 0; pl < planes; ++pl) {
      const float *src = px + pl * inPlane;
      float *dst = py + pl * outPlane;
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          float acc = init;
          bool nan = false;
          if (ch[i] > 0 && cw[j] > 0)
            for (int64_t a = 0; a < ch[i]; ++a) {
              const float *row = src + (fh[i] + a * dilH) * w + fw[j];
              if (dilW == 1)
                for (int64_t b = 0; b < cw[j]; ++b)
                  take(acc, nan, row[b]);
              else
                for (int64_t b = 0; b < cw[j]; ++b)
                  take(acc, nan, row[b * dilW]);
            }
          *dst++ = finish(acc, nan, dh[i] * dw[j]);
        }
    }
    return;
  }
  // Any number of spatial dimensions.
  std::vector<int64_t> is = rowMajorStrides(in);
  std::size_t last = sr - 1;
  std::vector<int64_t> oc(sr), kc(sr);
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float *src = px + pl * inPlane;
    float *dst = py + pl * outPlane;
    std::fill(oc.begin(), oc.end(), 0);
    for (int64_t o = 0; o < outPlane; ++o) {
      bool empty = false;
      int64_t div = 1;
      for (std::size_t d = 0; d < sr; ++d) {
        if (count[d][oc[d]] == 0)
          empty = true;
        div *= divisor[d][oc[d]];
      }
      float acc = init;
      bool nan = false;
      if (!empty) {
        std::fill(kc.begin(), kc.end(), 0);
        int64_t nL = count[last][oc[last]], dL = dil[last];
        while (true) {
          int64_t base = firstIdx[last][oc[last]];
          for (std::size_t d = 0; d < last; ++d)
            base += (firstIdx[d][oc[d]] + kc[d] * dil[d]) * is[d];
          const float *row = src + base;
          for (int64_t j = 0; j < nL; ++j)
            take(acc, nan, row[j * dL]);
          std::size_t d = last;
          while (d-- > 0) {
            if (++kc[d] < count[d][oc[d]])
              break;
            kc[d] = 0;
          }
          if (d == static_cast<std::size_t>(-1))
            break;
        }
      }
      dst[o] = finish(acc, nan, div);
      for (std::size_t d = sr; d-- > 0;) {
        if (++oc[d] < outSp[d])
          break;
        oc[d] = 0;
      }
    }
  }
}

} // namespace

void shoal::rt::cpu::pool(PoolOp op, const Tensor &x,
                          const WindowParams &window, bool countIncludePad,
                          Tensor &out) {
  const char *name = op == PoolOp::Max ? "MaxPool" : "AveragePool";
  // f16 and bf16 in f32; the max of 8-bit integers too (exact in f32).
  if (isHalfDType(x.dtype()) ||
      (op == PoolOp::Max &&
       (x.dtype() == DType::U8 || x.dtype() == DType::I8))) {
    if (!out.defined() || out.dtype() != x.dtype())
      checkOutput(out, x.dtype(), out.shape(), name);
    Tensor r(DType::F32, out.shape());
    pool(op, toF32(x), window, countIncludePad, r);
    return fromF32(r, out);
  }
  checkDType(x, DType::F32, name, "X");
  if (x.rank() < 3)
    throw Error(
        fmt::format("{}: X must have rank >= 3, got {}", name, x.type().str()));
  Shape shape = windowOutputShape(x.shape(), x.shape()[1], window);
  checkOutput(out, DType::F32, shape, name);
  if (op == PoolOp::Average)
    for (int64_t d : window.dilations)
      if (d != 1)
        throw Error("AveragePool: dilations must be 1");
  const Shape &xs = x.shape();
  Shape in(xs.begin() + 2, xs.end()), outSp(shape.begin() + 2, shape.end());
  WindowIndex wi = windowIndex(in, outSp, window, countIncludePad);
  int64_t planes = xs[0] * xs[1];
  if (op == PoolOp::Max)
    poolLoop<true>(x.data<float>(), out.data<float>(), planes, in, outSp,
                   wi.firstIdx, wi.count, wi.divisor, window.dilations);
  else
    poolLoop<false>(x.data<float>(), out.data<float>(), planes, in, outSp,
                    wi.firstIdx, wi.count, wi.divisor, window.dilations);
}

void shoal::rt::cpu::globalPool(PoolOp op, const Tensor &x, Tensor &out) {
  const char *name = op == PoolOp::Max ? "GlobalMaxPool" : "GlobalAveragePool";
  checkDType(x, DType::F32, name, "X");
  if (x.rank() < 2)
    throw Error(
        fmt::format("{}: X must have rank >= 2, got {}", name, x.type().str()));
  Shape shape = x.shape();
  std::fill(shape.begin() + 2, shape.end(), 1);
  checkOutput(out, DType::F32, shape, name);
  int64_t planes = shape[0] * shape[1];
  int64_t n = numElements(Shape(x.shape().begin() + 2, x.shape().end()));
  const float *px = x.data<float>();
  float *py = out.data<float>();
  for (int64_t p = 0; p < planes; ++p) {
    const float *src = px + p * n;
    if (op == PoolOp::Max) {
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j)
        if (src[j] > m || std::isnan(src[j]))
          m = src[j];
      py[p] = m;
    } else {
      double s = 0;
      for (int64_t j = 0; j < n; ++j)
        s += src[j];
      py[p] = n ? static_cast<float>(s / double(n))
                : std::numeric_limits<float>::quiet_NaN();
    }
  }
}

void shoal::rt::cpu::convInputGrad(const Tensor &x, const Tensor &w,
                                   const Tensor &dy, const WindowParams &window,
                                   int64_t group, Tensor &dx) {
  checkDType(w, DType::F32, "ConvInputGrad", "W");
  checkDType(dy, DType::F32, "ConvInputGrad", "dy");
  const Shape &xs = x.shape(), &ws = w.shape(), &ys = dy.shape();
  if (xs.size() < 3 || ws.size() != xs.size() || group < 1 ||
      ws[1] * group != xs[1] || ws[0] % group != 0 ||
      ys != windowOutputShape(xs, ws[0], window))
    throw Error(fmt::format("ConvInputGrad: x {}, W {} and dy {} do not fit "
                            "with group {}",
                            x.type().str(), w.type().str(), dy.type().str(),
                            group));
  checkOutput(dx, DType::F32, xs, "ConvInputGrad");
  int64_t n = xs[0], c = xs[1], m = ws[0], cg = c / group, mg = m / group;
  Shape in(xs.begin() + 2, xs.end()), outSp(ys.begin() + 2, ys.end());
  int64_t inPlane = numElements(in), p = numElements(outSp);
  int64_t kn = numElements(window.kernel);
  bool direct = isDirect(window);
  std::vector<float> col;
  if (!direct)
    col.resize(static_cast<std::size_t>(cg * kn * p));
  const float *pw = w.data<float>(), *pdy = dy.data<float>();
  float *pdx = dx.data<float>();
  std::fill(pdx, pdx + numElements(xs), 0.f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < group; ++g) {
      float *xg = pdx + (i * c + g * cg) * inPlane;
      const float *yg = pdy + (i * m + g * mg) * p;
      // col = W_g^T dy_g: [cg * kn, p].
      float *dst = direct ? xg : col.data();
      sgemmT(true, false, cg * kn, p, mg, pw + g * mg * cg * kn, cg * kn, yg, p,
             0.f, dst, p, "ConvInputGrad");
      if (!direct)
        col2im(col.data(), cg, in, outSp, window, xg);
    }
}

void shoal::rt::cpu::convWeightGrad(const Tensor &x, const Tensor &dy,
                                    const WindowParams &window, int64_t group,
                                    Tensor &dw) {
  checkDType(x, DType::F32, "ConvWeightGrad", "x");
  checkDType(dy, DType::F32, "ConvWeightGrad", "dy");
  const Shape &xs = x.shape(), &ys = dy.shape();
  if (xs.size() < 3 || ys.size() != xs.size() || group < 1 ||
      xs[1] % group != 0 || ys[1] % group != 0 ||
      ys != windowOutputShape(xs, ys[1], window))
    throw Error(fmt::format("ConvWeightGrad: x {} and dy {} do not fit with "
                            "group {}",
                            x.type().str(), dy.type().str(), group));
  int64_t n = xs[0], c = xs[1], m = ys[1], cg = c / group, mg = m / group;
  Shape ws{m, cg};
  ws.insert(ws.end(), window.kernel.begin(), window.kernel.end());
  checkOutput(dw, DType::F32, ws, "ConvWeightGrad");
  Shape in(xs.begin() + 2, xs.end()), outSp(ys.begin() + 2, ys.end());
  int64_t inPlane = numElements(in), p = numElements(outSp);
  int64_t kn = numElements(window.kernel);
  bool direct = isDirect(window);
  std::vector<float> col;
  if (!direct)
    col.resize(static_cast<std::size_t>(cg * kn * p));
  const float *px = x.data<float>(), *pdy = dy.data<float>();
  float *pdw = dw.data<float>();
  if (n == 0)
    std::fill(pdw, pdw + numElements(ws), 0.f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < group; ++g) {
      const float *xg = px + (i * c + g * cg) * inPlane;
      const float *mat = xg;
      if (!direct) {
        im2col(xg, cg, in, outSp, window, col.data());
        mat = col.data();
      }
      // dW_g += dy_g col^T: [mg, cg * kn].
      sgemmT(false, true, mg, cg * kn, p, pdy + (i * m + g * mg) * p, p, mat, p,
             i == 0 ? 0.f : 1.f, pdw + g * mg * cg * kn, cg * kn,
             "ConvWeightGrad");
    }
}

void shoal::rt::cpu::poolGrad(PoolOp op, const Tensor &x, const Tensor &dy,
                              const WindowParams &window, bool countIncludePad,
                              Tensor &dx) {
  const char *name = op == PoolOp::Max ? "MaxPoolGrad" : "AveragePoolGrad";
  checkDType(x, DType::F32, name, "x");
  checkDType(dy, DType::F32, name, "dy");
  const Shape &xs = x.shape();
  if (xs.size() < 3 || dy.shape() != windowOutputShape(xs, xs[1], window))
    throw Error(fmt::format("{}: x {} and dy {} do not fit the window", name,
                            x.type().str(), dy.type().str()));
  checkOutput(dx, DType::F32, xs, name);
  if (op == PoolOp::Average)
    for (int64_t d : window.dilations)
      if (d != 1)
        throw Error("AveragePoolGrad: dilations must be 1");
  const Shape &ys = dy.shape();
  std::size_t sr = xs.size() - 2;
  Shape in(xs.begin() + 2, xs.end()), outSp(ys.begin() + 2, ys.end());
  WindowIndex wi = windowIndex(in, outSp, window, countIncludePad);
  std::vector<int64_t> is = rowMajorStrides(in);
  int64_t inPlane = numElements(in), outPlane = numElements(outSp);
  int64_t planes = xs[0] * xs[1];
  const float *px = x.data<float>(), *pdy = dy.data<float>();
  float *pdx = dx.data<float>();
  std::fill(pdx, pdx + numElements(xs), 0.f);
  std::vector<int64_t> oc(sr), kc(sr);
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float *src = px + pl * inPlane;
    float *dst = pdx + pl * inPlane;
    const float *g = pdy + pl * outPlane;
    std::fill(oc.begin(), oc.end(), 0);
    for (int64_t o = 0; o < outPlane; ++o) {
      bool empty = false;
      int64_t div = 1;
      for (std::size_t d = 0; d < sr; ++d) {
        if (wi.count[d][oc[d]] == 0)
          empty = true;
        div *= wi.divisor[d][oc[d]];
      }
      if (!empty) {
        // The window's positions in row-major order; for the max, the
        // first maximum (PyTorch's tie rule; a NaN wins).
        float best = -std::numeric_limits<float>::infinity();
        int64_t arg = -1;
        float share = op == PoolOp::Average && div > 0 ? g[o] / float(div) : 0;
        std::fill(kc.begin(), kc.end(), 0);
        while (true) {
          int64_t at = 0;
          for (std::size_t d = 0; d < sr; ++d)
            at += (wi.firstIdx[d][oc[d]] + kc[d] * window.dilations[d]) * is[d];
          if (op == PoolOp::Max) {
            float v = src[at];
            if (arg < 0 || v > best || (v != v && best == best)) {
              best = v;
              arg = at;
            }
          } else {
            dst[at] += share;
          }
          std::size_t d = sr;
          while (d-- > 0) {
            if (++kc[d] < wi.count[d][oc[d]])
              break;
            kc[d] = 0;
          }
          if (d == static_cast<std::size_t>(-1))
            break;
        }
        if (op == PoolOp::Max)
          dst[arg] += g[o];
      }
      for (std::size_t d = sr; d-- > 0;) {
        if (++oc[d] < outSp[d])
          break;
        oc[d] = 0;
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

namespace {

SHOAL_CPU_KERNEL(convKernel) {
  conv(input(in, 0), input(in, 1), optionalInput(in, 2), op.attrs.window,
       op.attrs.group, out[0]);
}

SHOAL_CPU_KERNEL(maxPoolKernel) {
  pool(PoolOp::Max, input(in, 0), op.attrs.window, false, out[0]);
}

SHOAL_CPU_KERNEL(averagePoolKernel) {
  pool(PoolOp::Average, input(in, 0), op.attrs.window, op.attrs.countIncludePad,
       out[0]);
}

template <PoolOp Op> SHOAL_CPU_KERNEL(globalPoolKernel) {
  globalPool(Op, input(in, 0), out[0]);
}

SHOAL_CPU_KERNEL(convInputGradKernel) {
  convInputGrad(input(in, 0), input(in, 1), input(in, 2), op.attrs.window,
                op.attrs.group, out[0]);
}

SHOAL_CPU_KERNEL(convWeightGradKernel) {
  convWeightGrad(input(in, 0), input(in, 1), op.attrs.window, op.attrs.group,
                 out[0]);
}

template <PoolOp Op> SHOAL_CPU_KERNEL(poolGradKernel) {
  poolGrad(Op, input(in, 0), input(in, 1), op.attrs.window,
           op.attrs.countIncludePad, out[0]);
}

} // namespace

void shoal::rt::cpu::registerConvPoolKernels() {
  registerCpuKernel(OpKind::Conv, convKernel);
  registerCpuKernel(OpKind::MaxPool, maxPoolKernel);
  registerCpuKernel(OpKind::AveragePool, averagePoolKernel);
  registerCpuKernel(OpKind::GlobalAveragePool,
                    globalPoolKernel<PoolOp::Average>);
  registerCpuKernel(OpKind::GlobalMaxPool, globalPoolKernel<PoolOp::Max>);
  registerCpuKernel(OpKind::ConvInputGrad, convInputGradKernel);
  registerCpuKernel(OpKind::ConvWeightGrad, convWeightGradKernel);
  registerCpuKernel(OpKind::MaxPoolGrad, poolGradKernel<PoolOp::Max>);
  registerCpuKernel(OpKind::AveragePoolGrad, poolGradKernel<PoolOp::Average>);
}
