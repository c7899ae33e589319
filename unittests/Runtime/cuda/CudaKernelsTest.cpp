//===- CudaKernelsTest.cpp - CUDA kernels against the CPU ones --*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Every CUDA kernel runs on random host data copied to the device and is
// compared with the CPU kernel of cpu/Kernels.h on the same data (the 16-bit
// casts with a software rounding written here). Outputs are poisoned before
// each run so that an element the kernel leaves unwritten fails; shapes cover
// each kernel's fast paths, their fallbacks (odd sizes, misaligned pointers)
// and empty tensors. Without a CUDA device the binary prints a note and exits
// with 77, which CTest reports as skipped.
//
//===----------------------------------------------------------------------===//

#include "Device.h"
#include "Half.h"
#include "cpu/Backend.h"
#include "cpu/Kernels.h"
#include "cpu/Optimizers.h"
#include "cuda/Backend.h"
#include "cuda/CudaDevice.h"
#include "cuda/FusedKernels.h"
#include "cuda/Kernels.h"
#include "cuda/LtMatmul.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace shoal::rt;
namespace gpu = shoal::rt::cuda;
using cpu::BinaryOp;
using cpu::ReduceOp;
using cpu::UnaryOp;

namespace {

//===----------------------------------------------------------------------===//
// Device memory and comparisons
//===----------------------------------------------------------------------===//

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " +
                             cudaGetErrorString(err));
}

/// Device memory starting `offset` bytes into a fresh allocation (which is
/// 256-byte aligned), to test misaligned pointers.
class DeviceBuffer {
public:
  explicit DeviceBuffer(std::size_t bytes, std::size_t offset = 0)
      : bytes(bytes) {
    check(cudaMalloc(&base, bytes + offset + 1), "cudaMalloc");
    ptr = static_cast<uint8_t *>(base) + offset;
    // Poison: NaN for floats, -1 for integers, 0xff bytes for bool.
    check(cudaMemset(base, 0xff, bytes + offset + 1), "cudaMemset");
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() { cudaFree(base); }

  void *get() const { return ptr; }
  template <typename T> T *as() const { return reinterpret_cast<T *>(ptr); }

  void upload(const void *host) {
    check(cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice), "upload");
  }
  void download(void *host) const {
    check(cudaMemcpy(host, ptr, bytes, cudaMemcpyDeviceToHost), "download");
  }

private:
  void *base = nullptr;
  uint8_t *ptr = nullptr;
  std::size_t bytes;
};

std::unique_ptr<DeviceBuffer> toDevice(const Tensor &t,
                                       std::size_t offset = 0) {
  auto buf = std::make_unique<DeviceBuffer>(t.numBytes(), offset);
  if (t.numBytes())
    buf->upload(t.rawData());
  return buf;
}

Tensor fromDevice(const DeviceBuffer &buf, DType dtype, const Shape &shape) {
  Tensor t(dtype, shape);
  if (t.numBytes())
    buf.download(t.rawData());
  return t;
}

std::string str(const Shape &s) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < s.size(); ++i)
    os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

/// |got - want| <= tol * max(floor, |want|): relative above `floor`,
/// absolute below; NaN and infinities must match.
bool close(double got, double want, double tol, double floor) {
  if (std::isnan(want))
    return std::isnan(got);
  if (std::isinf(want))
    return got == want;
  return std::fabs(got - want) <= tol * std::max(floor, std::fabs(want));
}

/// Compares f32 tensors with close(); `floor` 1 suits values computed from
/// O(1) data with cancellation, a tiny one values that are all small
/// (probabilities).
void expectClose(const Tensor &got, const Tensor &want, double tol,
                 const std::string &what, double floor = 1.0) {
  ASSERT_EQ(got.numElements(), want.numElements()) << what;
  const float *g = got.data<float>();
  const float *w = want.data<float>();
  int failures = 0;
  for (int64_t i = 0; i < want.numElements(); ++i)
    if (!close(g[i], w[i], tol, floor)) {
      ADD_FAILURE() << what << ": at flat index " << i << " got " << g[i]
                    << ", want " << w[i];
      if (++failures == 10)
        return;
    }
}

void expectBytesEqual(const Tensor &got, const Tensor &want,
                      const std::string &what) {
  ASSERT_EQ(got.numBytes(), want.numBytes()) << what;
  std::size_t n = want.numBytes();
  for (std::size_t i = 0; i < n; ++i)
    if (got.bytes()[i] != want.bytes()[i]) {
      ADD_FAILURE() << what << ": first difference at byte " << i;
      return;
    }
}

//===----------------------------------------------------------------------===//
// Random data
//===----------------------------------------------------------------------===//

Tensor randomTensor(DType dtype, const Shape &shape, std::mt19937 &rng,
                    double lo = -1, double hi = 1) {
  Tensor t(dtype, shape);
  int64_t n = t.numElements();
  switch (dtype) {
  case DType::F32: {
    std::uniform_real_distribution<float> dist(static_cast<float>(lo),
                                               static_cast<float>(hi));
    for (int64_t i = 0; i < n; ++i)
      t.data<float>()[i] = dist(rng);
    break;
  }
  case DType::I64: {
    std::uniform_int_distribution<int64_t> dist(static_cast<int64_t>(lo),
                                                static_cast<int64_t>(hi));
    for (int64_t i = 0; i < n; ++i)
      t.data<int64_t>()[i] = dist(rng);
    break;
  }
  case DType::I32: {
    std::uniform_int_distribution<int32_t> dist(static_cast<int32_t>(lo),
                                                static_cast<int32_t>(hi));
    for (int64_t i = 0; i < n; ++i)
      t.data<int32_t>()[i] = dist(rng);
    break;
  }
  case DType::Bool: {
    std::uniform_int_distribution<int> dist(0, 1);
    for (int64_t i = 0; i < n; ++i)
      t.data<uint8_t>()[i] = uint8_t(dist(rng));
    break;
  }
  case DType::F16:
  case DType::BF16:
  case DType::F64:
  case DType::I8:
  case DType::U8:
    ADD_FAILURE() << "randomTensor: no generator for " << dtypeName(dtype);
    break;
  }
  return t;
}

/// Random integers spread over the whole range of the dtype's bytes (so
/// that a data-movement kernel that mixes up bytes shows).
Tensor randomBits(DType dtype, const Shape &shape, std::mt19937 &rng) {
  if (dtype == DType::Bool || dtype == DType::F32)
    return randomTensor(dtype, shape, rng);
  Tensor t(dtype, shape);
  for (std::size_t i = 0; i < t.numBytes(); ++i)
    t.bytes()[i] = uint8_t(rng());
  return t;
}

//===----------------------------------------------------------------------===//
// Fixture
//===----------------------------------------------------------------------===//

class CudaKernels : public ::testing::Test {
protected:
  void SetUp() override { check(cudaStreamCreate(&stream), "stream"); }
  void TearDown() override { cudaStreamDestroy(stream); }

  /// Waits for the stream and fails on any asynchronous error.
  void sync() {
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    check(cudaGetLastError(), "kernel");
  }

  cudaStream_t stream = nullptr;
  std::mt19937 rng{12345};
};

//===----------------------------------------------------------------------===//
// Element-wise
//===----------------------------------------------------------------------===//

struct BinaryCase {
  Shape a, b;
};

const std::vector<BinaryCase> &binaryCases() {
  static const std::vector<BinaryCase> cases = {
      {{3, 5, 7}, {3, 5, 7}}, // dense, with a tail past the packs
      {{1024}, {1024}},       // dense, whole packs
      {{}, {4, 5}},           // scalar a
      {{4, 5}, {}},           // scalar b
      {{1}, {2, 3}},          // scalar as [1]
      {{2, 3, 8}, {8}},       // trailing broadcast b (bias add)
      {{8}, {2, 3, 8}},       // trailing broadcast a
      {{2, 1, 8}, {3, 8}},    // both broadcast
      {{2, 3, 5}, {5}},       // trailing, not whole packs
      {{3, 1}, {1, 4}},       // outer product
      {{2, 1, 3}, {4, 1}},    // general
      {{5, 1, 1, 6}, {3, 1}}, // general, rank 4
      {{2, 3, 4}, {3, 1}},    // per-row broadcast
      {{0, 3}, {3}},          // empty
      {{1, 1}, {1}},          // one element
      {{2, 1, 2, 1, 2, 1, 2, 1}, {1, 2, 1, 2, 1, 2, 1, 2}}, // rank 8
      {{300001}, {300001}}, // many grid-stride steps
  };
  return cases;
}

void runBinary(cudaStream_t stream, BinaryOp op, DType dtype, const Tensor &a,
               const Tensor &b, double tol, std::size_t offset,
               const std::string &what) {
  Shape outShape = cpu::broadcastShape(a.shape(), b.shape());
  Tensor want(dtype, outShape);
  cpu::binary(op, a, b, want);
  auto da = toDevice(a, offset), db = toDevice(b, offset);
  DeviceBuffer dout(want.numBytes(), offset);
  gpu::binary(op, dtype, da->get(), a.shape(), db->get(), b.shape(), dout.get(),
              outShape, stream);
  check(cudaStreamSynchronize(stream), "sync");
  Tensor got = fromDevice(dout, dtype, outShape);
  // Add, Sub, Mul and Div round exactly once on both sides; only Pow's
  // rounding may differ, so compare relatively.
  if (dtype == DType::F32)
    expectClose(got, want, tol, what, 1e-30);
  else
    expectBytesEqual(got, want, what);
}

TEST_F(CudaKernels, BinaryF32) {
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul,
                      BinaryOp::Div, BinaryOp::Pow})
    for (const BinaryCase &c : binaryCases())
      for (std::size_t offset : {0, 4}) {
        // Positive bases for Pow, divisors away from zero for Div.
        double aLo = op == BinaryOp::Pow ? 0.5 : -2;
        double bLo = op == BinaryOp::Div ? 0.5 : -2;
        Tensor a = randomTensor(DType::F32, c.a, rng, aLo, 2);
        Tensor b = randomTensor(DType::F32, c.b, rng, bLo, 2);
        runBinary(stream, op, DType::F32, a, b, 1e-5, offset,
                  std::string(cpu::binaryName(op)) + " " + str(c.a) + " " +
                      str(c.b) + " offset " + std::to_string(offset));
      }
  sync();
}

TEST_F(CudaKernels, BinaryIntegers) {
  for (DType dtype : {DType::I64, DType::I32})
    for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul})
      for (const BinaryCase &c : binaryCases())
        for (std::size_t offset : {0, 8}) {
          Tensor a = randomTensor(dtype, c.a, rng, -30000, 30000);
          Tensor b = randomTensor(dtype, c.b, rng, -30000, 30000);
          runBinary(stream, op, dtype, a, b, 0, offset,
                    std::string(cpu::binaryName(op)) + " " + dtypeName(dtype) +
                        " " + str(c.a) + " " + str(c.b));
        }
  sync();
}

TEST_F(CudaKernels, BinaryRejectsBadInput) {
  // Everything here is rejected before a pointer is used.
  EXPECT_THROW(gpu::binary(BinaryOp::Div, DType::I64, nullptr, {2}, nullptr,
                           {2}, nullptr, {2}, stream),
               Error);
  EXPECT_THROW(gpu::binary(BinaryOp::Add, DType::Bool, nullptr, {2}, nullptr,
                           {2}, nullptr, {2}, stream),
               Error);
  EXPECT_THROW(gpu::binary(BinaryOp::Add, DType::F32, nullptr, {2, 3}, nullptr,
                           {3}, nullptr, {3, 3}, stream),
               Error);
  EXPECT_THROW(gpu::binary(BinaryOp::Add, DType::F32, nullptr, {2, 3}, nullptr,
                           {4}, nullptr, {2, 3}, stream),
               Error);
  Shape rank9(9, 1);
  EXPECT_THROW(gpu::binary(BinaryOp::Add, DType::F32, nullptr, rank9, nullptr,
                           rank9, nullptr, rank9, stream),
               Error);
}

TEST_F(CudaKernels, Unary) {
  for (UnaryOp op : {UnaryOp::Erf, UnaryOp::Tanh, UnaryOp::Relu, UnaryOp::Sqrt,
                     UnaryOp::Exp, UnaryOp::Neg, UnaryOp::Sigmoid})
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(4096 + 3)})
      for (std::size_t offset : {0, 4}) {
        double lo = op == UnaryOp::Sqrt ? 0 : -8;
        Tensor x = randomTensor(DType::F32, {n}, rng, lo, 8);
        if (n > 100 && op != UnaryOp::Sqrt) {
          // Far tails: Sigmoid must not overflow, Exp goes to 0 and inf.
          x.data<float>()[0] = -100.f;
          x.data<float>()[1] = 100.f;
        }
        Tensor want(DType::F32, {n});
        cpu::unary(op, x, want);
        auto din = toDevice(x, offset);
        DeviceBuffer dout(x.numBytes(), offset);
        gpu::unary(op, din->as<float>(), dout.as<float>(), n, stream);
        sync();
        expectClose(fromDevice(dout, DType::F32, {n}), want, 1e-5,
                    "unary op " + std::to_string(int(op)) + " n " +
                        std::to_string(n) + " offset " + std::to_string(offset),
                    1e-30);
        // In place.
        gpu::unary(op, din->as<float>(), din->as<float>(), n, stream);
        sync();
        expectClose(fromDevice(*din, DType::F32, {n}), want, 1e-5,
                    "in-place unary op " + std::to_string(int(op)), 1e-30);
      }
}

TEST_F(CudaKernels, Fill) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(1027)})
    for (std::size_t offset : {0, 4}) {
      DeviceBuffer buf(n * sizeof(float), offset);
      gpu::fill(buf.as<float>(), 3.5f, n, stream);
      sync();
      Tensor got = fromDevice(buf, DType::F32, {n});
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got.data<float>()[i], 3.5f) << "n " << n << " at " << i;
    }
}

//===----------------------------------------------------------------------===//
// Softmax and LayerNormalization
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, Softmax) {
  struct Case {
    Shape shape;
    int64_t axis;
  };
  const Case cases[] = {
      {{4, 7}, 1},    {{3, 100}, 1},  {{2, 3, 1000}, 2}, // warp per row
      {{5, 1025}, 1}, {{3, 5000}, 1},                    // block per row
      {{2, 6, 5}, 1}, {{6, 5}, 0},    {{2, 3, 4, 5}, 2}, // strided
      {{7, 3, 1}, 1}, {{1, 33}, 1},   {{4, 1}, 1},
      {{}, 0},        {{2, 0, 3}, 1}, {{0, 4}, 1},
  };
  for (const Case &c : cases) {
    Tensor x = randomTensor(DType::F32, c.shape, rng, -20, 20);
    // Masked entries, as attention masks make them.
    std::bernoulli_distribution masked(0.1);
    for (int64_t i = 0; i < x.numElements(); ++i)
      if (masked(rng))
        x.data<float>()[i] = -std::numeric_limits<float>::infinity();
    Tensor want(DType::F32, c.shape);
    cpu::softmax(x, c.axis, want);
    auto din = toDevice(x);
    DeviceBuffer dout(x.numBytes());
    gpu::softmax(din->as<float>(), dout.as<float>(), c.shape, c.axis, stream);
    sync();
    std::string what =
        "softmax " + str(c.shape) + " axis " + std::to_string(c.axis);
    // Relative: most probabilities of a long row are far below 1.
    expectClose(fromDevice(dout, DType::F32, c.shape), want, 1e-4, what, 1e-30);
    gpu::softmax(din->as<float>(), din->as<float>(), c.shape, c.axis, stream);
    sync();
    expectClose(fromDevice(*din, DType::F32, c.shape), want, 1e-4,
                "in-place " + what, 1e-30);
  }
}

TEST_F(CudaKernels, LayerNorm) {
  struct Case {
    Shape x;
    int64_t axis;
    Shape scale;
    bool hasBias;
    Shape bias;
  };
  const Case cases[] = {
      {{4, 16}, 1, {16}, true, {16}},
      {{3, 5, 8}, 1, {5, 8}, true, {8}},
      {{3, 5, 8}, 2, {8}, false, {}},
      {{6, 10}, 1, {1}, true, {1}},
      {{2, 5, 8}, 1, {5, 1}, true, {1, 8}}, // general broadcast, warp
      {{7, 33}, 1, {33}, true, {33}},
      {{5, 1000}, 1, {1000}, true, {1000}},    // 32 per lane
      {{2, 3000}, 1, {3000}, true, {3000}},    // block per row
      {{2, 3, 1500}, 1, {1500}, true, {3, 1}}, // general broadcast, block
      {{2, 3}, 0, {2, 3}, true, {3}},          // one row
      {{0, 4}, 1, {4}, true, {4}},             // empty
  };
  for (const Case &c : cases) {
    // An offset mean tests that the variance is not taken as E[x^2]-E[x]^2.
    Tensor x = randomTensor(DType::F32, c.x, rng, 2, 6);
    Tensor scale = randomTensor(DType::F32, c.scale, rng, 0.5, 1.5);
    Tensor bias = randomTensor(DType::F32, c.bias, rng, -1, 1);
    Tensor want(DType::F32, c.x);
    cpu::layerNorm(x, scale, c.hasBias ? &bias : nullptr, c.axis, 1e-5f, want,
                   nullptr, nullptr);
    auto dx = toDevice(x), dscale = toDevice(scale), dbias = toDevice(bias);
    DeviceBuffer dy(x.numBytes());
    gpu::layerNorm(dx->as<float>(), dscale->as<float>(), c.scale,
                   c.hasBias ? dbias->as<float>() : nullptr, c.bias,
                   dy.as<float>(), c.x, c.axis, 1e-5f, stream);
    sync();
    std::string what = "layerNorm " + str(c.x) + " axis " +
                       std::to_string(c.axis) + " scale " + str(c.scale) +
                       (c.hasBias ? " bias " + str(c.bias) : "");
    expectClose(fromDevice(dy, DType::F32, c.x), want, 1e-4, what);
    gpu::layerNorm(dx->as<float>(), dscale->as<float>(), c.scale,
                   c.hasBias ? dbias->as<float>() : nullptr, c.bias,
                   dx->as<float>(), c.x, c.axis, 1e-5f, stream);
    sync();
    expectClose(fromDevice(*dx, DType::F32, c.x), want, 1e-4,
                "in-place " + what);
  }
  EXPECT_THROW(gpu::layerNorm(nullptr, nullptr, {3}, nullptr, {}, nullptr,
                              {2, 4}, 1, 1e-5f, stream),
               Error);
}

// The loss and its gradient against the CPU kernels: vocabularies below,
// at and above one thread block's width, ignored rows, a large logit
// offset (the max shift), one row and none; a label out of range sets the
// error flag.
TEST_F(CudaKernels, SoftmaxCrossEntropyMatchesTheCpu) {
  const int64_t ignore = -100;
  for (Shape shape : {Shape{4, 7}, Shape{3, 256}, Shape{2, 3, 1000},
                      Shape{1, 50304}, Shape{5, 1}, Shape{0, 9}}) {
    Shape rows(shape.begin(), shape.end() - 1);
    int64_t v = shape.back();
    Tensor x = randomTensor(DType::F32, shape, rng, 20, 30);
    Tensor labels(DType::I64, rows);
    std::uniform_int_distribution<int64_t> pick(0, v - 1);
    for (int64_t r = 0; r < labels.numElements(); ++r)
      labels.data<int64_t>()[r] = r % 3 == 1 ? ignore : pick(rng);
    Tensor dloss = randomTensor(DType::F32, rows, rng, 0.1, 2);
    Tensor loss(DType::F32, rows), grad(DType::F32, shape);
    cpu::softmaxCrossEntropy(x, labels, ignore, loss);
    cpu::softmaxCrossEntropyGrad(x, labels, dloss, ignore, grad);
    auto dx = toDevice(x), dl = toDevice(labels), dd = toDevice(dloss);
    DeviceBuffer dout(loss.numBytes()), dgrad(grad.numBytes());
    int64_t n = labels.numElements();
    gpu::softmaxCrossEntropy(dx->as<float>(), dl->as<int64_t>(), n, v, ignore,
                             dout.as<float>(), nullptr, stream);
    gpu::softmaxCrossEntropyGrad(dx->as<float>(), dl->as<int64_t>(),
                                 dd->as<float>(), n, v, ignore,
                                 dgrad.as<float>(), nullptr, stream);
    sync();
    expectClose(fromDevice(dout, DType::F32, rows), loss, 1e-5,
                "softmaxCrossEntropy " + str(shape));
    expectClose(fromDevice(dgrad, DType::F32, shape), grad, 1e-4,
                "softmaxCrossEntropyGrad " + str(shape), 1e-6);
  }
  Tensor x = randomTensor(DType::F32, {2, 5}, rng);
  Tensor labels(DType::I64, {2});
  labels.data<int64_t>()[0] = 1;
  labels.data<int64_t>()[1] = 5; // out of [0, 5)
  auto dx = toDevice(x), dl = toDevice(labels);
  DeviceBuffer dout(2 * sizeof(float)), flag(sizeof(int));
  check(cudaMemset(flag.get(), 0, sizeof(int)), "memset");
  gpu::softmaxCrossEntropy(dx->as<float>(), dl->as<int64_t>(), 2, 5, -100,
                           dout.as<float>(), flag.as<int>(), stream);
  sync();
  int f = 0;
  check(cudaMemcpy(&f, flag.get(), sizeof(int), cudaMemcpyDeviceToHost),
        "flag");
  EXPECT_EQ(f, 1);
}

// The embedding gradient against the CPU kernel: repeated and negative
// indices, rows no index hits (0), i64 and i32 indices, rows wider than a
// block; deterministic (two runs give the same bytes); an index out of
// range sets the error flag.
TEST_F(CudaKernels, GatherGradMatchesTheCpu) {
  struct Case {
    Shape indices;
    int64_t rows, h;
  };
  const Case cases[] = {{{2, 8}, 5, 3}, {{64}, 1000, 16}, {{4, 16}, 96, 300},
                        {{1}, 1, 1},    {{3, 5}, 7, 1},   {{0}, 4, 8}};
  for (DType it : {DType::I64, DType::I32})
    for (const Case &c : cases) {
      Tensor idx(it, c.indices);
      std::uniform_int_distribution<int64_t> pick(-c.rows, c.rows - 1);
      for (int64_t i = 0; i < idx.numElements(); ++i) {
        int64_t v = i % 4 == 3 ? 0 : pick(rng); // row 0 hit often
        if (it == DType::I64)
          idx.data<int64_t>()[i] = v;
        else
          idx.data<int32_t>()[i] = static_cast<int32_t>(v);
      }
      Shape dyShape = c.indices;
      dyShape.push_back(c.h);
      Tensor dy = randomTensor(DType::F32, dyShape, rng);
      Tensor want(DType::F32, {c.rows, c.h});
      cpu::gatherGrad(idx, dy, want);
      int64_t n = idx.numElements();
      auto di = toDevice(idx), ddy = toDevice(dy);
      DeviceBuffer got(want.numBytes()), again(want.numBytes());
      DeviceBuffer work(gpu::gatherGradWorkspace(n, c.rows));
      for (DeviceBuffer *out : {&got, &again})
        gpu::gatherGrad(di->get(), it, n, ddy->as<float>(), c.rows, c.h,
                        out->as<float>(), work.get(), nullptr, stream);
      sync();
      std::string what = std::string("gatherGrad ") + dtypeName(it) + " " +
                         str(c.indices) + " rows " + std::to_string(c.rows);
      expectClose(fromDevice(got, DType::F32, want.shape()), want, 1e-6, what);
      expectBytesEqual(fromDevice(again, DType::F32, want.shape()),
                       fromDevice(got, DType::F32, want.shape()),
                       what + " (deterministic)");
    }
  // A vocabulary-parallel block: rows [6, 10) of 16; the other ranks'
  // indices are left out, and the lookup gives them zeros.
  {
    Tensor idx(DType::I64, {3, 7});
    std::uniform_int_distribution<int64_t> pick(-16, 15);
    for (int64_t i = 0; i < idx.numElements(); ++i)
      idx.data<int64_t>()[i] = pick(rng);
    Tensor dy = randomTensor(DType::F32, {3, 7, 5}, rng);
    cpu::VocabBlock block{16, 6};
    Tensor want(DType::F32, {4, 5});
    cpu::gatherGrad(idx, dy, want, &block);
    auto di = toDevice(idx), ddy = toDevice(dy);
    DeviceBuffer got(want.numBytes()), work(gpu::gatherGradWorkspace(21, 4));
    gpu::gatherGrad(di->get(), DType::I64, 21, ddy->as<float>(), 4, 5,
                    got.as<float>(), work.get(), nullptr, stream, 16, 6);
    Tensor table = randomTensor(DType::F32, {4, 5}, rng);
    Tensor wantRows(DType::F32, {3, 7, 5});
    cpu::gather(table, idx, 0, wantRows, &block);
    auto dt = toDevice(table);
    DeviceBuffer rowsOut(wantRows.numBytes());
    gpu::gather(dt->get(), DType::F32, {4, 5}, di->get(), DType::I64, {3, 7}, 0,
                rowsOut.get(), nullptr, stream, 16, 6);
    sync();
    expectClose(fromDevice(got, DType::F32, {4, 5}), want, 1e-6,
                "vocabulary-parallel gatherGrad");
    expectBytesEqual(fromDevice(rowsOut, DType::F32, {3, 7, 5}), wantRows,
                     "vocabulary-parallel gather");
  }
  Tensor idx(DType::I64, {2});
  idx.data<int64_t>()[0] = 1;
  idx.data<int64_t>()[1] = 9; // out of [-4, 4)
  Tensor dy = randomTensor(DType::F32, {2, 3}, rng);
  auto di = toDevice(idx), ddy = toDevice(dy);
  DeviceBuffer out(4 * 3 * sizeof(float)), flag(sizeof(int));
  DeviceBuffer work(gpu::gatherGradWorkspace(2, 4));
  check(cudaMemset(flag.get(), 0, sizeof(int)), "memset");
  gpu::gatherGrad(di->get(), DType::I64, 2, ddy->as<float>(), 4, 3,
                  out.as<float>(), work.get(), flag.as<int>(), stream);
  sync();
  int f = 0;
  check(cudaMemcpy(&f, flag.get(), sizeof(int), cudaMemcpyDeviceToHost),
        "flag");
  EXPECT_EQ(f, 1);
}

// The vocabulary-parallel loss ops against the CPU kernels, for the
// first block (all classes real) and the last (padding past the
// vocabulary): labels held here, held elsewhere and ignored.
TEST_F(CudaKernels, VocabLossMatchesTheCpu) {
  const int64_t size = 13, c = 7, ignore = -100;
  Tensor labels = Tensor(DType::I64, {2, 3});
  const int64_t values[] = {0, 9, -100, 12, 7, 6};
  std::memcpy(labels.rawData(), values, sizeof values);
  for (int64_t offset : {int64_t(0), int64_t(7)}) {
    cpu::VocabBlock block{size, offset};
    Tensor x = randomTensor(DType::F32, {2, 3, c}, rng, -3, 3);
    Tensor mx(DType::F32, {2, 3}), stats(DType::F32, {2, 3, 2}),
        loss(DType::F32, {2, 3}), grad(DType::F32, {2, 3, c});
    Tensor dloss = randomTensor(DType::F32, {2, 3}, rng, 0.5, 1.5);
    cpu::vocabMax(x, block, mx);
    cpu::vocabStats(x, labels, mx, block, ignore, stats);
    cpu::vocabCrossEntropy(mx, stats, labels, ignore, loss);
    cpu::vocabCrossEntropyGrad(x, labels, dloss, mx, stats, block, ignore,
                               grad);
    auto dx = toDevice(x), dl = toDevice(labels), dd = toDevice(dloss);
    auto dmx = toDevice(mx), dst = toDevice(stats);
    DeviceBuffer gMax(mx.numBytes()), gStats(stats.numBytes()),
        gLoss(loss.numBytes()), gGrad(grad.numBytes());
    gpu::vocabMax(dx->as<float>(), 6, c, size, offset, gMax.as<float>(),
                  stream);
    gpu::vocabStats(dx->as<float>(), dl->as<int64_t>(), dmx->as<float>(), 6, c,
                    size, offset, ignore, gStats.as<float>(), nullptr, stream);
    gpu::vocabCrossEntropy(dmx->as<float>(), dst->as<float>(),
                           dl->as<int64_t>(), 6, ignore, gLoss.as<float>(),
                           stream);
    gpu::vocabCrossEntropyGrad(dx->as<float>(), dl->as<int64_t>(),
                               dd->as<float>(), dmx->as<float>(),
                               dst->as<float>(), 6, c, size, offset, ignore,
                               gGrad.as<float>(), nullptr, stream);
    sync();
    std::string at = " offset " + std::to_string(offset);
    expectBytesEqual(fromDevice(gMax, DType::F32, {2, 3}), mx, "vocabMax" + at);
    expectClose(fromDevice(gStats, DType::F32, {2, 3, 2}), stats, 1e-6,
                "vocabStats" + at);
    expectClose(fromDevice(gLoss, DType::F32, {2, 3}), loss, 1e-6,
                "vocabCrossEntropy" + at);
    expectClose(fromDevice(gGrad, DType::F32, {2, 3, c}), grad, 1e-6,
                "vocabCrossEntropyGrad" + at, 1e-6);
  }
}

// Softmax's gradient along the last axis against the CPU kernel, in place
// too (the attention gradient writes dS over dP).
TEST_F(CudaKernels, SoftmaxGradMatchesTheCpu) {
  for (Shape shape : {Shape{4, 7}, Shape{3, 256}, Shape{2, 3, 1000},
                      Shape{1, 1}, Shape{0, 5}}) {
    Tensor x = randomTensor(DType::F32, shape, rng, -3, 3);
    Tensor y(DType::F32, shape), dy = randomTensor(DType::F32, shape, rng);
    int64_t axis = static_cast<int64_t>(shape.size()) - 1;
    cpu::softmax(x, axis, y);
    Tensor want(DType::F32, shape);
    cpu::softmaxGrad(y, dy, axis, want);
    int64_t n = shape.back(), rows = n ? y.numElements() / n : 0;
    auto dyv = toDevice(y), ddy = toDevice(dy);
    DeviceBuffer got(want.numBytes());
    gpu::softmaxGradRows(dyv->as<float>(), ddy->as<float>(), got.as<float>(),
                         rows, n, stream);
    gpu::softmaxGradRows(dyv->as<float>(), ddy->as<float>(), ddy->as<float>(),
                         rows, n, stream);
    sync();
    expectClose(fromDevice(got, DType::F32, shape), want, 1e-5,
                "softmaxGrad " + str(shape));
    expectClose(fromDevice(*ddy, DType::F32, shape), want, 1e-5,
                "in-place softmaxGrad " + str(shape));
  }
}

// LayerNorm's and RMSNorm's input and scale gradients against the CPU
// kernels: rows below and above one block's width, an offset mean, several
// normalized dimensions, one row.
TEST_F(CudaKernels, LayerNormGradsMatchTheCpu) {
  struct Case {
    Shape x;
    int64_t axis;
  };
  const Case cases[] = {{{4, 16}, 1},   {{3, 5, 8}, 1}, {{3, 5, 8}, 2},
                        {{2, 3000}, 1}, {{1, 64}, 1},   {{7, 33}, 1},
                        {{300, 24}, 1}};
  for (bool rms : {false, true})
    for (const Case &c : cases) {
      Shape norm(c.x.begin() + c.axis, c.x.end());
      Tensor x = randomTensor(DType::F32, c.x, rng, 2, 6);
      Tensor scale = randomTensor(DType::F32, norm, rng, 0.5, 1.5);
      Tensor dy = randomTensor(DType::F32, c.x, rng, -1, 1);
      Tensor wantDx(DType::F32, c.x), wantDs(DType::F32, norm);
      cpu::layerNormGrad(x, scale, dy, c.axis, 1e-5f, wantDx, rms);
      cpu::layerNormScaleGrad(x, dy, c.axis, 1e-5f, wantDs, rms);
      int64_t n = scale.numElements(), rows = x.numElements() / n;
      auto dx = toDevice(x), ds = toDevice(scale), ddy = toDevice(dy);
      DeviceBuffer gotDx(x.numBytes()), gotDs(scale.numBytes());
      DeviceBuffer work(gpu::layerNormScaleGradWorkspace(rows));
      gpu::layerNormGrad(dx->as<float>(), ds->as<float>(), ddy->as<float>(),
                         rows, n, 1e-5f, rms, gotDx.as<float>(), stream);
      gpu::layerNormScaleGrad(dx->as<float>(), ddy->as<float>(), rows, n, 1e-5f,
                              rms, gotDs.as<float>(), work.get(), stream);
      sync();
      std::string what = str(c.x) + " axis " + std::to_string(c.axis) +
                         (rms ? " (RMSNorm)" : "");
      expectClose(fromDevice(gotDx, DType::F32, c.x), wantDx, 1e-4,
                  "layerNormGrad " + what);
      expectClose(fromDevice(gotDs, DType::F32, norm), wantDs, 1e-5,
                  "layerNormScaleGrad " + what);
    }
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, Gather) {
  struct Case {
    Shape data;
    int64_t axis;
    Shape indices;
  };
  const Case cases[] = {
      {{5, 4, 3}, 0, {2, 3}}, {{5, 4, 3}, 1, {2, 3}}, {{5, 4, 3}, 2, {2, 3}},
      {{6, 8}, 0, {5}},       {{10, 4}, 1, {7}},      {{6, 8}, 0, {}},
      {{6, 8}, 1, {0}},       {{3, 1000}, 0, {4, 2}},
  };
  DeviceBuffer flag(sizeof(int));
  for (DType dtype : {DType::F32, DType::I64, DType::I32, DType::Bool})
    for (DType indexType : {DType::I64, DType::I32})
      for (const Case &c : cases) {
        int64_t len = c.data[c.axis];
        Tensor data = randomBits(dtype, c.data, rng);
        Tensor indices = randomTensor(indexType, c.indices, rng, -len, len - 1);
        Tensor want(dtype, cpu::gatherShape(c.data, c.indices, c.axis));
        cpu::gather(data, indices, c.axis, want);
        auto dd = toDevice(data), di = toDevice(indices);
        DeviceBuffer dout(want.numBytes());
        check(cudaMemset(flag.get(), 0, sizeof(int)), "memset");
        gpu::gather(dd->get(), dtype, c.data, di->get(), indexType, c.indices,
                    c.axis, dout.get(), flag.as<int>(), stream);
        sync();
        std::string what = std::string("gather ") + dtypeName(dtype) + " " +
                           str(c.data) + " axis " + std::to_string(c.axis) +
                           " " + dtypeName(indexType) + " indices " +
                           str(c.indices);
        expectBytesEqual(fromDevice(dout, dtype, want.shape()), want, what);
        int f = -1;
        check(cudaMemcpy(&f, flag.get(), sizeof(int), cudaMemcpyDeviceToHost),
              "flag");
        EXPECT_EQ(f, 0) << what;
      }
}

TEST_F(CudaKernels, GatherOutOfRange) {
  for (DType indexType : {DType::I64, DType::I32}) {
    Tensor data = randomTensor(DType::F32, {5, 3}, rng);
    Tensor indices(indexType, {4});
    const int64_t values[] = {1, 5, -1, -6};
    for (int i = 0; i < 4; ++i) {
      if (indexType == DType::I64)
        indices.data<int64_t>()[i] = values[i];
      else
        indices.data<int32_t>()[i] = int32_t(values[i]);
    }
    auto dd = toDevice(data), di = toDevice(indices);
    DeviceBuffer dout(4 * 3 * sizeof(float));
    DeviceBuffer flag(sizeof(int));
    check(cudaMemset(flag.get(), 0, sizeof(int)), "memset");
    gpu::gather(dd->get(), DType::F32, {5, 3}, di->get(), indexType, {4}, 0,
                dout.get(), flag.as<int>(), stream);
    sync();
    int f = 0;
    check(cudaMemcpy(&f, flag.get(), sizeof(int), cudaMemcpyDeviceToHost),
          "flag");
    EXPECT_EQ(f, 1);
    Tensor got = fromDevice(dout, DType::F32, {4, 3});
    const float *g = got.data<float>(), *d = data.data<float>();
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(g[0 * 3 + j], d[1 * 3 + j]);
      EXPECT_EQ(g[1 * 3 + j], 0.f);
      EXPECT_EQ(g[2 * 3 + j], d[4 * 3 + j]);
      EXPECT_EQ(g[3 * 3 + j], 0.f);
    }
  }
}

/// Transpose by definition, for any element size.
std::vector<uint8_t> refTranspose(const std::vector<uint8_t> &in,
                                  std::size_t elemSize, const Shape &inShape,
                                  const std::vector<int64_t> &perm) {
  std::size_t rank = inShape.size();
  Shape outShape(rank);
  for (std::size_t d = 0; d < rank; ++d)
    outShape[d] = inShape[perm[d]];
  int64_t n = std::accumulate(inShape.begin(), inShape.end(), int64_t(1),
                              std::multiplies<int64_t>());
  std::vector<uint8_t> out(in.size());
  std::vector<int64_t> c(rank), inC(rank);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i;
    for (std::size_t d = rank; d-- > 0;) {
      c[d] = rest % outShape[d];
      rest /= outShape[d];
    }
    for (std::size_t d = 0; d < rank; ++d)
      inC[perm[d]] = c[d];
    int64_t src = 0;
    for (std::size_t d = 0; d < rank; ++d)
      src = src * inShape[d] + inC[d];
    std::memcpy(&out[i * elemSize], &in[src * elemSize], elemSize);
  }
  return out;
}

TEST_F(CudaKernels, Transpose) {
  struct Case {
    Shape shape;
    std::vector<int64_t> perm;
  };
  std::vector<Case> cases = {
      {{64, 48}, {1, 0}},              // tiled
      {{128, 96}, {1, 0}},             // tiled, several tiles
      {{3, 33, 65}, {0, 2, 1}},        // tiled, partial tiles, batch
      {{5, 6, 7}, {2, 1, 0}},          // small: generic
      {{40, 3, 50}, {2, 1, 0}},        // tiled, batch in the middle
      {{4, 5, 6, 7}, {0, 2, 1, 3}},    // inner dimension stays
      {{2, 64, 32, 16}, {0, 2, 1, 3}}, // inner run of 64 bytes
      {{2, 3, 4, 5}, {3, 1, 2, 0}},
      {{17, 1}, {1, 0}}, // a copy
      {{1, 1, 5}, {2, 0, 1}},
      {{}, {}},                                             // scalar
      {{0, 3}, {1, 0}},                                     // empty
      {{2, 1, 2, 3, 1, 2, 2, 3}, {7, 0, 6, 1, 5, 2, 4, 3}}, // rank 8
  };
  for (std::vector<int64_t> perm : {std::vector<int64_t>{0, 1, 2},
                                    {0, 2, 1},
                                    {1, 0, 2},
                                    {1, 2, 0},
                                    {2, 0, 1},
                                    {2, 1, 0}})
    cases.push_back({{2, 3, 4}, perm});
  for (DType dtype : {DType::F32, DType::I64, DType::Bool})
    for (const Case &c : cases)
      for (std::size_t offset : {0, 4}) {
        Tensor x = randomBits(dtype, c.shape, rng);
        Tensor want(dtype, cpu::transposeShape(c.shape, c.perm));
        cpu::transpose(x, c.perm, want);
        auto din = toDevice(x, offset);
        DeviceBuffer dout(want.numBytes(), offset);
        gpu::transpose(din->get(), dtypeSize(dtype), c.shape, c.perm,
                       dout.get(), stream);
        sync();
        expectBytesEqual(fromDevice(dout, dtype, want.shape()), want,
                         std::string("transpose ") + dtypeName(dtype) + " " +
                             str(c.shape) + " offset " +
                             std::to_string(offset));
      }
  // Element sizes no dtype has: 2, 12 and 16 bytes.
  for (std::size_t elemSize : {2, 12, 16})
    for (const Case &c : cases) {
      int64_t n = std::accumulate(c.shape.begin(), c.shape.end(), int64_t(1),
                                  std::multiplies<int64_t>());
      std::vector<uint8_t> in(n * elemSize);
      for (uint8_t &v : in)
        v = uint8_t(rng());
      std::vector<uint8_t> want = refTranspose(in, elemSize, c.shape, c.perm);
      DeviceBuffer din(in.size()), dout(in.size());
      if (n)
        din.upload(in.data());
      gpu::transpose(din.get(), elemSize, c.shape, c.perm, dout.get(), stream);
      sync();
      std::vector<uint8_t> got(in.size());
      if (n)
        dout.download(got.data());
      EXPECT_EQ(got, want) << "transpose of " << elemSize << "-byte elements "
                           << str(c.shape);
    }
  EXPECT_THROW(gpu::transpose(nullptr, 4, {2, 3}, {0, 0}, nullptr, stream),
               Error);
  EXPECT_THROW(gpu::transpose(nullptr, 4, {2, 3}, {0}, nullptr, stream), Error);
}

// Expand against the CPU kernel: broadcasts of leading, inner and middle
// dimensions, a plain copy, a scalar, an empty output, every element size
// (and misaligned buffers, which narrow the copy unit).
TEST_F(CudaKernels, ExpandMatchesTheCpu) {
  struct Case {
    Shape in, out;
  };
  std::vector<Case> cases = {
      {{3}, {4, 3}},
      {{4, 1}, {4, 5}},
      {{1, 3, 1}, {2, 3, 4}},
      {{2, 1, 4}, {2, 3, 4}},
      {{5}, {5}},
      {{}, {2, 2}},
      {{1}, {7}},
      {{1, 1}, {0, 3}},
      {{2, 1, 1, 3}, {2, 4, 5, 3}},
      {{16}, {3, 16}},
      {{1, 16, 1}, {2, 16, 33}},
  };
  for (DType dtype : {DType::F32, DType::I64, DType::Bool, DType::BF16})
    for (const Case &c : cases)
      for (std::size_t offset : {0, 2}) {
        Tensor x = randomBits(dtype, c.in, rng);
        Tensor want(dtype, c.out);
        cpu::expand(x, want);
        auto din = toDevice(x, offset);
        DeviceBuffer dout(want.numBytes(), offset); // poisoned
        gpu::expand(din->get(), dtypeSize(dtype), c.in, c.out, dout.get(),
                    stream);
        sync();
        expectBytesEqual(fromDevice(dout, dtype, want.shape()), want,
                         std::string("expand ") + dtypeName(dtype) + " " +
                             str(c.in) + " to " + str(c.out) + " offset " +
                             std::to_string(offset));
      }
  EXPECT_THROW(gpu::expand(nullptr, 4, {3}, {4, 2}, nullptr, stream), Error);
  EXPECT_THROW(gpu::expand(nullptr, 4, {2, 3}, {3}, nullptr, stream), Error);
}

// Slice (starts and positive steps), Concat and constant Pad against the
// CPU kernels, on several element sizes and misaligned buffers.
TEST_F(CudaKernels, SliceConcatPadMatchTheCpu) {
  for (DType dtype : {DType::F32, DType::I64, DType::Bool, DType::BF16})
    for (std::size_t offset : {0, 2}) {
      std::string tag =
          std::string(dtypeName(dtype)) + " offset " + std::to_string(offset);
      // Slice: a middle block, every other row, a single element.
      struct SliceCase {
        Shape in, out;
        std::vector<int64_t> first, step;
      };
      const SliceCase slices[] = {
          {{4, 6, 8}, {2, 3, 8}, {1, 2, 0}, {1, 1, 1}},
          {{5, 7}, {3, 4}, {0, 1}, {2, 2}},
          {{3, 4}, {1, 1}, {2, 3}, {1, 1}},
          {{2, 16, 33}, {2, 8, 32}, {0, 1, 1}, {1, 2, 1}},
      };
      for (const SliceCase &c : slices) {
        Tensor x = randomBits(dtype, c.in, rng), want(dtype, c.out);
        cpu::slice(x, c.first, c.step, want);
        auto dx = toDevice(x, offset);
        DeviceBuffer got(want.numBytes(), offset);
        gpu::slice(dx->get(), dtypeSize(dtype), c.in, c.first, c.step,
                   got.get(), c.out, stream);
        sync();
        expectBytesEqual(fromDevice(got, dtype, c.out), want,
                         "slice " + str(c.in) + " to " + str(c.out) + " " +
                             tag);
      }
      // Concat along the first, a middle and the last axis.
      for (int64_t axis : {0, 1, 2}) {
        Shape a = {2, 3, 5}, b = a;
        b[axis] = 4;
        Tensor ta = randomBits(dtype, a, rng), tb = randomBits(dtype, b, rng);
        Shape os = a;
        os[axis] += b[axis];
        Tensor want(dtype, os);
        cpu::concat({&ta, &tb}, axis, want);
        auto da = toDevice(ta, offset), db = toDevice(tb, offset);
        DeviceBuffer got(want.numBytes(), offset);
        gpu::concat({da->get(), db->get()}, {a, b}, axis, dtypeSize(dtype),
                    got.get(), os, stream);
        sync();
        expectBytesEqual(fromDevice(got, dtype, os), want,
                         "concat axis " + std::to_string(axis) + " " + tag);
      }
      // Pad with zeros, and rows before and after.
      Shape in = {3, 5};
      std::vector<int64_t> pads = {1, 0, 2, 3};
      Shape os = {6, 8};
      Tensor x = randomBits(dtype, in, rng), want(dtype, os);
      cpu::pad(x, pads, PadMode::Constant, 0.0, want);
      auto dx = toDevice(x, offset);
      DeviceBuffer got(want.numBytes(), offset);
      gpu::padConstant(dx->get(), in, dtypeSize(dtype), pads, 0.f, got.get(),
                       os, stream);
      sync();
      expectBytesEqual(fromDevice(got, dtype, os), want, "pad " + tag);
    }
  // An f32 pad value.
  Tensor x = randomTensor(DType::F32, {2, 3}, rng), want(DType::F32, {4, 4});
  std::vector<int64_t> pads = {1, 0, 1, 1};
  cpu::pad(x, pads, PadMode::Constant, -2.5, want);
  auto dx = toDevice(x);
  DeviceBuffer got(want.numBytes());
  gpu::padConstant(dx->get(), {2, 3}, 4, pads, -2.5f, got.get(), {4, 4},
                   stream);
  sync();
  expectBytesEqual(fromDevice(got, DType::F32, {4, 4}), want, "pad -2.5");
  EXPECT_THROW(gpu::slice(nullptr, 4, {3}, {0}, {-1}, nullptr, {2}, stream),
               Error);
}

// Cast among f32, i64, i32 and bool against the CPU kernel, with NaN,
// infinities, values past the integer ranges and negative integers.
TEST_F(CudaKernels, CastMatchesTheCpu) {
  const float specials[] = {0.f,   -0.f,    1.5f, -1.5f,    2.5e9f,    -2.5e9f,
                            1e20f, -1e20f,  NAN,  INFINITY, -INFINITY, 7.f,
                            -7.9f, 65536.f, 3.f,  0.25f};
  const DType types[] = {DType::F32, DType::I64, DType::I32, DType::Bool};
  for (DType from : types) {
    Tensor f32(DType::F32, {16});
    std::memcpy(f32.rawData(), specials, sizeof specials);
    Tensor x(from, {16});
    cpu::cast(f32, x); // the CPU's own conversion makes the inputs
    if (from == DType::I64)
      x.data<int64_t>()[3] = int64_t(1) << 40; // wraps into i32
    for (DType to : types) {
      Tensor want(to, {16});
      cpu::cast(x, want);
      auto dx = toDevice(x);
      DeviceBuffer got(want.numBytes());
      ASSERT_TRUE(gpu::castSupported(from, to));
      gpu::cast(dx->get(), from, got.get(), to, 16, stream);
      sync();
      expectBytesEqual(fromDevice(got, to, {16}), want,
                       std::string("cast ") + dtypeName(from) + " to " +
                           dtypeName(to));
    }
  }
  // Integers and bool to bf16 and f16 (one correct rounding, as the CPU's
  // round-to-odd float then nearest-even 16 bits).
  for (DType from : {DType::I64, DType::I32, DType::Bool})
    for (DType to : {DType::BF16, DType::F16}) {
      Tensor x(from, {6});
      const int64_t ints[] = {0, 1, -3, 257, 16777217, (int64_t(1) << 40) + 3};
      for (int i = 0; i < 6; ++i) {
        if (from == DType::I64)
          x.data<int64_t>()[i] = ints[i];
        else if (from == DType::I32)
          x.data<int32_t>()[i] = static_cast<int32_t>(ints[i] % 100000000);
        else
          x.data<uint8_t>()[i] = static_cast<uint8_t>(i % 2 ? 0 : 0x80 + i);
      }
      Tensor want(to, {6});
      cpu::cast(x, want);
      auto dx = toDevice(x);
      DeviceBuffer got(want.numBytes());
      gpu::cast(dx->get(), from, got.get(), to, 6, stream);
      sync();
      expectBytesEqual(fromDevice(got, to, {6}), want,
                       std::string("cast ") + dtypeName(from) + " to " +
                           dtypeName(to));
    }
  EXPECT_FALSE(gpu::castSupported(DType::BF16, DType::I64));
}

// Where with the condition, X and Y each broadcast, against the CPU.
TEST_F(CudaKernels, WhereMatchesTheCpu) {
  struct Case {
    Shape c, x, y;
  };
  const Case cases[] = {{{4, 5}, {4, 5}, {4, 5}},
                        {{1, 1, 3, 3}, {2, 4, 3, 3}, {}},
                        {{3, 1}, {1, 7}, {3, 7}},
                        {{0, 2}, {0, 2}, {1}}};
  for (DType dtype : {DType::F32, DType::I64, DType::Bool, DType::BF16})
    for (const Case &c : cases) {
      Tensor cond(DType::Bool, c.c);
      for (int64_t i = 0; i < cond.numElements(); ++i)
        cond.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 2);
      Tensor x = randomBits(dtype, c.x, rng), y = randomBits(dtype, c.y, rng);
      Shape os = cpu::broadcastShape(cpu::broadcastShape(c.c, c.x), c.y);
      Tensor want(dtype, os);
      cpu::where(cond, x, y, want);
      auto dc = toDevice(cond), dx = toDevice(x), dy = toDevice(y);
      DeviceBuffer got(want.numBytes());
      gpu::where(dc->as<uint8_t>(), c.c, dx->get(), c.x, dy->get(), c.y,
                 dtypeSize(dtype), got.get(), os, stream);
      sync();
      expectBytesEqual(fromDevice(got, dtype, os), want,
                       std::string("where ") + dtypeName(dtype) + " " +
                           str(c.c) + " " + str(c.x) + " " + str(c.y));
    }
}

// TopK against the CPU kernel (both select through IndexMath.h's
// topKRow): every axis, largest and smallest, ties (few distinct values)
// and a NaN, values and indices bit for bit.
TEST_F(CudaKernels, TopKMatchesTheCpu) {
  const Shape shape = {3, 7, 5};
  for (int64_t axis = 0; axis < 3; ++axis)
    for (bool largest : {true, false})
      for (int64_t k : {int64_t(1), int64_t(2), shape[axis]}) {
        Tensor x(DType::F32, shape);
        for (int64_t i = 0; i < x.numElements(); ++i)
          x.data<float>()[i] = static_cast<float>(rng() % 5) - 2.f;
        x.data<float>()[4] = std::numeric_limits<float>::quiet_NaN();
        Shape os = shape;
        os[axis] = k;
        Tensor wantV(DType::F32, os), wantI(DType::I64, os);
        cpu::topK(x, k, axis, largest, wantV, &wantI);
        auto dx = toDevice(x);
        DeviceBuffer v(wantV.numBytes()), ix(wantI.numBytes());
        gpu::topK(dx->as<float>(), shape, axis, k, largest, v.as<float>(),
                  ix.as<int64_t>(), stream);
        sync();
        std::string what = "topK axis " + std::to_string(axis) + " k " +
                           std::to_string(k) + (largest ? " largest" : "");
        expectBytesEqual(fromDevice(v, DType::F32, os), wantV, what);
        expectBytesEqual(fromDevice(ix, DType::I64, os), wantI, what);
      }
}

// GatherElements and ScatterElements (none, and add on f32) against the
// CPU kernels, with negative indices, i32 and i64 indices, a bf16 and an
// f32 tensor; an index out of range sets the error flag.
TEST_F(CudaKernels, GatherScatterElementsMatchTheCpu) {
  const Shape data = {4, 6}, idx = {3, 6};
  for (DType dtype : {DType::F32, DType::BF16})
    for (DType it : {DType::I64, DType::I32})
      for (int64_t axis : {0, 1}) {
        Shape is = axis == 0 ? idx : Shape{4, 3};
        Tensor x = randomBits(dtype, data, rng);
        if (dtype == DType::F32)
          x = randomTensor(dtype, data, rng);
        Tensor indices(it, is);
        int64_t len = data[axis];
        for (int64_t i = 0; i < indices.numElements(); ++i) {
          int64_t v = static_cast<int64_t>(rng() % (2 * len)) - len;
          if (it == DType::I64)
            indices.data<int64_t>()[i] = v;
          else
            indices.data<int32_t>()[i] = static_cast<int32_t>(v);
        }
        Tensor up = dtype == DType::F32 ? randomTensor(dtype, is, rng)
                                        : randomBits(dtype, is, rng);
        std::string what = std::string(dtypeName(dtype)) + " " + dtypeName(it) +
                           " axis " + std::to_string(axis);
        auto dd = toDevice(x), di = toDevice(indices), du = toDevice(up);
        Tensor wantG(dtype, is);
        cpu::gatherElements(x, indices, axis, wantG);
        DeviceBuffer g(wantG.numBytes());
        gpu::gatherElements(dd->get(), dtypeSize(dtype), data, di->get(), it,
                            is, axis, g.get(), nullptr, stream);
        sync();
        expectBytesEqual(fromDevice(g, dtype, is), wantG, "gather " + what);
        // Scatter without a reduction: distinct indices along the axis
        // ((r + c) mod len at position (r, c)), so that one update lands
        // on each element it reaches.
        for (int64_t i = 0; i < indices.numElements(); ++i) {
          int64_t v = (i / is[1] + i % is[1]) % len;
          if (it == DType::I64)
            indices.data<int64_t>()[i] = v;
          else
            indices.data<int32_t>()[i] = static_cast<int32_t>(v);
        }
        di = toDevice(indices);
        for (bool add : {false, true}) {
          if (add && dtype != DType::F32)
            continue;
          Tensor want(dtype, data);
          cpu::scatterElements(
              x, indices, up, axis,
              add ? ScatterReduction::Add : ScatterReduction::None, want);
          DeviceBuffer out(want.numBytes());
          gpu::scatterElements(dd->get(), dtypeSize(dtype), data, di->get(), it,
                               is, du->get(), axis, add, out.get(), nullptr,
                               stream);
          sync();
          if (add)
            expectClose(fromDevice(out, dtype, data), want, 1e-6,
                        "scatter add " + what);
          else
            expectBytesEqual(fromDevice(out, dtype, data), want,
                             "scatter " + what);
        }
      }
  // Out of range: the flag.
  Tensor x = randomTensor(DType::F32, {2, 3}, rng);
  Tensor bad(DType::I64, {2, 3});
  for (int64_t i = 0; i < 6; ++i)
    bad.data<int64_t>()[i] = i == 4 ? 7 : 0;
  auto dx = toDevice(x), db = toDevice(bad);
  DeviceBuffer flag(sizeof(int)), out(x.numBytes());
  int zero = 0;
  flag.upload(&zero);
  gpu::gatherElements(dx->get(), 4, {2, 3}, db->get(), DType::I64, {2, 3}, 1,
                      out.get(), flag.as<int>(), stream);
  sync();
  int got = 0;
  flag.download(&got);
  EXPECT_EQ(got, 1);
}

// RMSNorm's forward (LayerNormalization with rms) against the CPU: warp
// and block rows.
TEST_F(CudaKernels, RmsNormMatchesTheCpu) {
  for (Shape shape : {Shape{4, 16}, Shape{3, 1000}, Shape{2, 3000}}) {
    Shape norm = {shape.back()};
    Tensor x = randomTensor(DType::F32, shape, rng, -2, 2);
    Tensor scale = randomTensor(DType::F32, norm, rng, 0.5, 1.5);
    Tensor want(DType::F32, shape);
    cpu::layerNorm(x, scale, nullptr, 1, 1e-6f, want, nullptr, nullptr, true);
    auto dx = toDevice(x), ds = toDevice(scale);
    DeviceBuffer got(x.numBytes());
    gpu::layerNorm(dx->as<float>(), ds->as<float>(), norm, nullptr, {},
                   got.as<float>(), shape, 1, 1e-6f, stream, true);
    sync();
    expectClose(fromDevice(got, DType::F32, shape), want, 1e-4,
                "rmsNorm " + str(shape));
  }
}

// cuBLASLt products of bf16 and f16 operands (ltMatmul, what MatMul and
// Gemm run on 16-bit operands) against a double-precision product of the
// same 16-bit values: plain, transposed (Gemm's transA/transB), batched
// with a broadcast A, odd sizes, results in the operands' type and in f32,
// and beta = 1 (a weight gradient adding itself over micro-batches).
TEST_F(CudaKernels, LtMatmulMatchesADoubleProduct) {
  std::unique_ptr<Device> cuda = makeCudaDevice(0, Precision::FP32);
  auto &d = static_cast<gpu::CudaDevice &>(*cuda);
  struct Case {
    int64_t m, n, k, batch;
    bool transA, transB, broadcastA;
  };
  const Case cases[] = {
      {64, 48, 32, 1, false, false, false}, {7, 5, 3, 1, false, false, false},
      {33, 17, 65, 1, true, false, false},  {16, 24, 40, 1, false, true, false},
      {9, 11, 13, 1, true, true, false},    {8, 16, 24, 3, false, false, false},
      {5, 7, 9, 4, false, false, true}};
  auto value = [](DType t, const Tensor &x, int64_t i) {
    uint16_t h = static_cast<const uint16_t *>(x.rawData())[i];
    return t == DType::BF16 ? double(bf16ToFloat(h)) : double(halfToFloat(h));
  };
  // Uniform in [-1, 1], rounded to the 16-bit type.
  auto random = [&](DType t, int64_t n) {
    if (t == DType::F32)
      return randomTensor(t, {n}, rng);
    Tensor f = randomTensor(DType::F32, {n}, rng);
    Tensor h(t, {n});
    for (int64_t i = 0; i < n; ++i)
      static_cast<uint16_t *>(h.rawData())[i] =
          t == DType::BF16 ? floatToBF16(f.data<float>()[i])
                           : floatToHalf(f.data<float>()[i]);
    return h;
  };
  for (DType ab : {DType::BF16, DType::F16})
    for (DType ct : {ab, DType::F32})
      for (const Case &c : cases)
        for (float beta : {0.0f, 1.0f}) {
          int64_t aMats = c.broadcastA ? 1 : c.batch;
          Tensor a = random(ab, aMats * c.m * c.k);
          Tensor b = random(ab, c.batch * c.k * c.n);
          Tensor c0 = random(ct, c.batch * c.m * c.n);
          lt::RowMajorProduct p;
          p.m = c.m;
          p.n = c.n;
          p.k = c.k;
          p.batch = c.batch;
          p.transA = c.transA;
          p.transB = c.transB;
          p.strideA = c.broadcastA || c.batch == 1 ? 0 : c.m * c.k;
          p.strideB = c.batch == 1 ? 0 : c.k * c.n;
          p.strideC = c.batch == 1 ? 0 : c.m * c.n;
          auto da = toDevice(a), db = toDevice(b), dc = toDevice(c0);
          gpu::ltMatmul(d, p, da->get(), db->get(), ab, dc->get(), ct, 1.0f,
                        beta);
          check(cudaStreamSynchronize(d.stream()), "sync");
          Tensor got = fromDevice(*dc, ct, {c.batch * c.m * c.n});
          std::string what =
              std::string(dtypeName(ab)) + " into " + dtypeName(ct) + " m" +
              std::to_string(c.m) + " n" + std::to_string(c.n) + " k" +
              std::to_string(c.k) + " batch " + std::to_string(c.batch) +
              (c.transA ? " transA" : "") + (c.transB ? " transB" : "") +
              (beta != 0 ? " beta 1" : "");
          for (int64_t e = 0; e < c.batch; ++e)
            for (int64_t i = 0; i < c.m; ++i)
              for (int64_t j = 0; j < c.n; ++j) {
                double want = 0, mag = 0;
                for (int64_t q = 0; q < c.k; ++q) {
                  int64_t ai = (c.broadcastA ? 0 : e) * c.m * c.k +
                               (c.transA ? q * c.m + i : i * c.k + q);
                  int64_t bi =
                      e * c.k * c.n + (c.transB ? j * c.k + q : q * c.n + j);
                  double t = value(ab, a, ai) * value(ab, b, bi);
                  want += t;
                  mag += std::fabs(t);
                }
                int64_t ci = (e * c.m + i) * c.n + j;
                double before = ct == DType::F32 ? double(c0.data<float>()[ci])
                                                 : value(ct, c0, ci);
                want += beta * before;
                mag += std::fabs(beta * before);
                double g = ct == DType::F32 ? double(got.data<float>()[ci])
                                            : value(ct, got, ci);
                // f32 accumulation, then one rounding to the result type.
                double tol = (ct == DType::F32 ? 1e-5 : 1e-2) * (mag + 1e-3);
                ASSERT_NEAR(g, want, tol) << what << " at " << ci;
              }
        }
}

// The data movement of the device-buffer collectives (the Executor under
// NCCL) against the host versions on the CPU device: packBlocks for a
// reduce-scatter (even, uneven with a short zero-padded last block, along
// the first, a middle and the last dimension) and concatBlocks after an
// all-gather.
TEST_F(CudaKernels, CollectiveBlocksMatchTheHost) {
  std::unique_ptr<Device> cuda = makeCudaDevice(0, Precision::FP32);
  std::unique_ptr<Device> host = makeCpuDevice();
  struct Case {
    Shape shape;
    int64_t n, dim;
  };
  const Case cases[] = {{{8, 3}, 2, 0},
                        {{7, 3}, 2, 0},
                        {{2, 5, 3}, 2, 1},
                        {{2, 9}, 4, 1},
                        {{3, 4, 6}, 3, 2}};
  for (DType dtype : {DType::F32, DType::BF16})
    for (const Case &c : cases) {
      std::string what = std::string(dtypeName(dtype)) + " " + str(c.shape) +
                         " n " + std::to_string(c.n) + " dim " +
                         std::to_string(c.dim);
      Tensor in = randomBits(dtype, c.shape, rng);
      int64_t block = (c.shape[c.dim] + c.n - 1) / c.n;
      Shape blockShape = c.shape;
      blockShape[c.dim] = block;
      int64_t packedElems =
          c.n * std::accumulate(blockShape.begin(), blockShape.end(),
                                int64_t(1), std::multiplies<int64_t>());
      Tensor want(dtype, {packedElems});
      host->packBlocks(in, c.n, c.dim, want);
      Tensor din = cuda->fromHost(in);
      Tensor got = cuda->allocate({dtype, {packedElems}});
      cuda->packBlocks(din, c.n, c.dim, got);
      expectBytesEqual(cuda->toHost(got), want, "packBlocks " + what);
      if (c.shape[c.dim] % c.n != 0)
        continue;
      Tensor blocks = randomBits(dtype, {in.numElements()}, rng);
      Tensor wantOut(dtype, c.shape);
      host->concatBlocks(blocks, c.n, c.dim, wantOut);
      Tensor dblocks = cuda->fromHost(blocks);
      Tensor out = cuda->allocate({dtype, c.shape});
      cuda->concatBlocks(dblocks, c.n, c.dim, out);
      expectBytesEqual(cuda->toHost(out), wantOut, "concatBlocks " + what);
    }
}

TEST_F(CudaKernels, Reduce) {
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
  };
  std::vector<Case> cases = {
      {{3, 2000}, {1}},     // block per output
      {{2000, 3}, {0}},     // columns, narrow tiles
      {{300, 5, 200}, {1}}, // columns, wide tiles
      {{64, 70}, {0}},
      {{7, 1500, 3}, {1}},
      {{2, 3, 4, 5}, {0, 2}}, // columns with a strided reduction
      {{2, 3, 4, 5}, {1, 3}}, // rows with a strided reduction
      {{2, 3, 4, 5}, {1, 2}},
      {{2, 3, 4, 5}, {0, 3}},
      {{2, 3, 4, 5}, {0, 1, 2, 3}},
      {{2, 1, 3}, {1}}, // nothing to add up: a copy
      {{2, 3}, {}},
      {{0, 3}, {0}}, // empty sums (and means of nothing)
      {{3, 0}, {1}},
      {{0, 3}, {1}}, // empty output
      {{}, {}},
  };
  for (std::vector<int64_t> axes :
       {std::vector<int64_t>{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}})
    cases.push_back({{4, 5, 6}, axes});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean})
    for (const Case &c : cases) {
      Tensor x = randomTensor(DType::F32, c.shape, rng);
      Shape outShape = cpu::reduceShape(c.shape, c.axes, true);
      Tensor want(DType::F32, outShape);
      cpu::reduce(op, x, c.axes, want);
      auto din = toDevice(x);
      DeviceBuffer dout(want.numBytes());
      gpu::reduce(op, din->as<float>(), c.shape, c.axes, dout.as<float>(),
                  stream);
      sync();
      std::string axes;
      for (int64_t a : c.axes)
        axes += std::to_string(a) + " ";
      expectClose(fromDevice(dout, DType::F32, outShape), want, 1e-5,
                  std::string(op == ReduceOp::Sum ? "sum " : "mean ") +
                      str(c.shape) + " axes " + axes,
                  1e-6);
    }
}

TEST_F(CudaKernels, SliceBlock) {
  Shape shape = {6, 4, 10};
  for (DType dtype : {DType::F32, DType::I64, DType::Bool})
    for (int64_t dim = 0; dim < 3; ++dim)
      for (int64_t numBlocks : {1, 2, 3, 4, 5})
        for (std::size_t offset : {0, 4}) {
          if (shape[dim] % numBlocks != 0)
            continue;
          Tensor x = randomBits(dtype, shape, rng);
          auto din = toDevice(x, offset);
          for (int64_t index = 0; index < numBlocks; ++index) {
            Shape blockShape = shape;
            blockShape[dim] /= numBlocks;
            Tensor want(dtype, blockShape);
            cpu::sliceBlock(x, dim, numBlocks, index, want);
            DeviceBuffer dout(want.numBytes(), offset);
            gpu::sliceBlock(din->get(), dtypeSize(dtype), shape, dim, numBlocks,
                            index, dout.get(), stream);
            sync();
            expectBytesEqual(fromDevice(dout, dtype, blockShape), want,
                             std::string("sliceBlock ") + dtypeName(dtype) +
                                 " dim " + std::to_string(dim) + " block " +
                                 std::to_string(index) + " of " +
                                 std::to_string(numBlocks));
          }
        }
  EXPECT_THROW(gpu::sliceBlock(nullptr, 4, shape, 0, 4, 0, nullptr, stream),
               Error);
  EXPECT_THROW(gpu::sliceBlock(nullptr, 4, shape, 3, 1, 0, nullptr, stream),
               Error);
  EXPECT_THROW(gpu::sliceBlock(nullptr, 4, shape, 0, 2, 2, nullptr, stream),
               Error);
}

TEST_F(CudaKernels, ConcatBlocks) {
  Shape blockShape = {3, 2, 5};
  for (DType dtype : {DType::F32, DType::I64, DType::Bool})
    for (int64_t dim = 0; dim < 3; ++dim)
      for (int64_t numBlocks : {1, 2, 3})
        for (std::size_t offset : {0, 4}) {
          Shape outShape = blockShape;
          outShape[dim] *= numBlocks;
          Shape all = blockShape;
          all.insert(all.begin(), numBlocks);
          Tensor blocks = randomBits(dtype, all, rng);
          Tensor want(dtype, outShape);
          cpu::concatBlocks(blocks.bytes(), numBlocks, dim, want);
          auto din = toDevice(blocks, offset);
          DeviceBuffer dout(want.numBytes(), offset);
          gpu::concatBlocks(din->get(), dtypeSize(dtype), blockShape, numBlocks,
                            dim, dout.get(), stream);
          sync();
          expectBytesEqual(fromDevice(dout, dtype, outShape), want,
                           std::string("concatBlocks ") + dtypeName(dtype) +
                               " dim " + std::to_string(dim) + " of " +
                               std::to_string(numBlocks) + " offset " +
                               std::to_string(offset));
        }
  // Slicing along a middle dimension and concatenating the blocks again
  // gives the input back.
  Shape shape = {4, 6, 8};
  Tensor x = randomTensor(DType::F32, shape, rng);
  auto dx = toDevice(x);
  DeviceBuffer blocks(x.numBytes()), back(x.numBytes());
  for (int64_t i = 0; i < 3; ++i)
    gpu::sliceBlock(dx->get(), 4, shape, 1, 3, i,
                    blocks.as<float>() + i * x.numElements() / 3, stream);
  gpu::concatBlocks(blocks.get(), 4, {4, 2, 8}, 3, 1, back.get(), stream);
  sync();
  expectBytesEqual(fromDevice(back, DType::F32, shape), x, "slice and concat");
}

//===----------------------------------------------------------------------===//
// 16-bit casts
//===----------------------------------------------------------------------===//

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// f32 to bf16, round to nearest even (NaN handled by the caller).
uint16_t refToBF16(float f) {
  uint32_t u = bitsOf(f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// f32 to IEEE half, round to nearest even, overflow to infinity.
uint16_t refToF16(float f) {
  uint32_t u = bitsOf(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a >= 0x477ff000u) // 65520 and up round to infinity
    return sign | 0x7c00u;
  if (a >= 0x38800000u) { // 2^-14 and up: normal halves
    uint32_t mant = a & 0x7fffffu;
    uint32_t h = (((a >> 23) - 112u) << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
      ++h; // a carry into the exponent is still right
    return uint16_t(sign | h);
  }
  if (a <= 0x33000000u) // 2^-25 and below round to zero
    return sign;
  // Subnormal halves count units of 2^-24.
  int e = int(a >> 23);
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  int shift = 126 - e;
  uint32_t h = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u)))
    ++h;
  return uint16_t(sign | h);
}

float refFromF16(uint16_t h) {
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(float(mant), -24);
  else if (exp == 31)
    v = mant ? std::numeric_limits<float>::quiet_NaN()
             : std::numeric_limits<float>::infinity();
  else
    v = std::ldexp(float(mant | 0x400), exp - 25);
  return (h & 0x8000) ? -v : v;
}

bool isNaN16(gpu::DType16 t, uint16_t h) {
  return t == gpu::DType16::BF16
             ? (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0
             : (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}

TEST_F(CudaKernels, CastToSixteenBits) {
  std::vector<float> values = {0.f,
                               -0.f,
                               1.f,
                               -1.f,
                               65504.f,
                               65519.99f,
                               65520.f,
                               70000.f,
                               -1e30f,
                               1e-8f,
                               5.9604645e-8f,
                               2.9802322e-8f,
                               2.9802326e-8f,
                               6.1035156e-5f,
                               6.1e-5f,
                               1.f + 1.f / 2048,
                               1.f + 3.f / 2048,
                               1.f + 1.f / 256,
                               1.f + 3.f / 256,
                               3.3895314e38f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::max()};
  // Random magnitudes over the ranges of both formats, and random bits.
  std::uniform_real_distribution<float> mant(1.f, 2.f);
  std::uniform_int_distribution<int> exp(-30, 20);
  for (int i = 0; i < 50000; ++i)
    values.push_back((i % 2 ? -1.f : 1.f) * std::ldexp(mant(rng), exp(rng)));
  for (int i = 0; i < 50000; ++i)
    values.push_back(floatOf(uint32_t(rng())));
  int64_t n = int64_t(values.size());
  for (gpu::DType16 to : {gpu::DType16::BF16, gpu::DType16::F16})
    for (std::size_t offset : {0, 4}) {
      DeviceBuffer din(n * sizeof(float), offset);
      din.upload(values.data());
      DeviceBuffer dout(n * sizeof(uint16_t), offset / 2);
      gpu::castF32To(to, din.as<float>(), dout.get(), n, stream);
      sync();
      std::vector<uint16_t> got(n);
      dout.download(got.data());
      int failures = 0;
      for (int64_t i = 0; i < n && failures < 10; ++i) {
        float v = values[i];
        bool ok;
        uint16_t want = 0;
        if (std::isnan(v)) {
          ok = isNaN16(to, got[i]);
        } else {
          want = to == gpu::DType16::BF16 ? refToBF16(v) : refToF16(v);
          ok = got[i] == want;
        }
        if (!ok) {
          ++failures;
          ADD_FAILURE() << (to == gpu::DType16::BF16 ? "bf16" : "f16") << " of "
                        << v << " (bits 0x" << std::hex << bitsOf(v)
                        << "): got 0x" << got[i] << ", want 0x" << want
                        << std::dec;
        }
      }
    }
}

TEST_F(CudaKernels, CastFromSixteenBits) {
  // Every 16-bit pattern.
  std::vector<uint16_t> all(65536);
  std::iota(all.begin(), all.end(), 0);
  int64_t n = int64_t(all.size());
  for (gpu::DType16 from : {gpu::DType16::BF16, gpu::DType16::F16})
    for (std::size_t offset : {0, 2}) {
      DeviceBuffer din(n * sizeof(uint16_t), offset);
      din.upload(all.data());
      DeviceBuffer dout(n * sizeof(float), offset * 2);
      gpu::castToF32(from, din.get(), dout.as<float>(), n, stream);
      sync();
      std::vector<float> got(n);
      dout.download(got.data());
      int failures = 0;
      for (int64_t i = 0; i < n && failures < 10; ++i) {
        uint16_t h = all[i];
        float want = from == gpu::DType16::BF16 ? floatOf(uint32_t(h) << 16)
                                                : refFromF16(h);
        bool ok = std::isnan(want) ? std::isnan(got[i])
                                   : bitsOf(got[i]) == bitsOf(want);
        if (!ok) {
          ++failures;
          ADD_FAILURE() << (from == gpu::DType16::BF16 ? "bf16" : "f16")
                        << " 0x" << std::hex << h << std::dec << ": got "
                        << got[i] << ", want " << want;
        }
      }
    }
}

} // namespace

//===----------------------------------------------------------------------===//
// Fused kernels (cuda/FusedKernels.cu)
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, GeluWithBias) {
  for (bool tanhForm : {false, true})
    for (bool withBias : {false, true}) {
      Shape shape{6, 37};
      Tensor x = randomTensor(DType::F32, shape, rng);
      Tensor bias = randomTensor(DType::F32, {37}, rng);
      Tensor want(DType::F32, shape);
      cpu::gelu(x, withBias ? &bias : nullptr, want, tanhForm);
      auto dx = toDevice(x), db = toDevice(bias);
      DeviceBuffer out(x.numBytes());
      gpu::gelu(dx->as<float>(), withBias ? db->as<float>() : nullptr, 37,
                out.as<float>(), x.numElements(), tanhForm, stream);
      sync();
      expectClose(fromDevice(out, DType::F32, shape), want, 1e-5, "gelu", 1e-6);
    }
}

TEST_F(CudaKernels, GeluGradWithBias) {
  for (bool tanhForm : {false, true})
    for (bool withBias : {false, true}) {
      Shape shape{6, 37};
      Tensor dy = randomTensor(DType::F32, shape, rng);
      Tensor x = randomTensor(DType::F32, shape, rng);
      Tensor bias = randomTensor(DType::F32, {37}, rng);
      Tensor want(DType::F32, shape);
      cpu::geluGrad(dy, x, withBias ? &bias : nullptr, want, tanhForm);
      auto ddy = toDevice(dy), dx = toDevice(x), db = toDevice(bias);
      DeviceBuffer out(x.numBytes());
      gpu::geluGrad(ddy->as<float>(), dx->as<float>(),
                    withBias ? db->as<float>() : nullptr, 37, out.as<float>(),
                    x.numElements(), tanhForm, stream);
      sync();
      expectClose(fromDevice(out, DType::F32, shape), want, 1e-5, "gelu_grad",
                  1e-6);
    }
}

TEST_F(CudaKernels, AddLayerNorm) {
  for (Shape shape : {Shape{4, 64}, Shape{3, 2, 1500}, Shape{5, 33}}) {
    int64_t cols = shape.back(), rows = 1;
    for (std::size_t i = 0; i + 1 < shape.size(); ++i)
      rows *= shape[i];
    Tensor a = randomTensor(DType::F32, shape, rng);
    Tensor b = randomTensor(DType::F32, shape, rng);
    Tensor g = randomTensor(DType::F32, {cols}, rng);
    Tensor beta = randomTensor(DType::F32, {cols}, rng);
    Tensor sum(DType::F32, shape), want(DType::F32, shape);
    cpu::addLayerNorm(a, b, g, &beta, static_cast<int64_t>(shape.size()) - 1,
                      1e-5f, sum, want);
    auto da = toDevice(a), dbb = toDevice(b), dg = toDevice(g),
         dbeta = toDevice(beta);
    DeviceBuffer dsum(a.numBytes()), dy(a.numBytes());
    gpu::addLayerNorm(da->as<float>(), dbb->as<float>(), dg->as<float>(),
                      dbeta->as<float>(), dsum.as<float>(), dy.as<float>(),
                      rows, cols, 1e-5f, stream);
    sync();
    expectClose(fromDevice(dsum, DType::F32, shape), sum, 1e-6, "sum", 1e-6);
    expectClose(fromDevice(dy, DType::F32, shape), want, 1e-4, "y", 1.0);
  }
}

int main(int argc, char **argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: skipping\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

// AdamW on the device against the CPU update, over three steps (with a
// gradient scale and weight decay): both run adamwElement (UpdateMath.h),
// the GPU with FMA contraction allowed, so within a few float ulps.
TEST_F(CudaKernels, AdamWMatchesTheCpuUpdate) {
  OptimizerParams p;
  p.kind = OptimizerParams::AdamW;
  p.lr = 1e-3;
  p.beta1 = 0.9;
  p.beta2 = 0.999;
  p.eps = 1e-8;
  p.weightDecay = 0.01;
  for (int64_t n : {1, 7, 4099}) {
    Shape shape{n};
    Tensor w = randomTensor(DType::F32, shape, rng);
    Tensor m(DType::F32, shape), v(DType::F32, shape);
    std::memset(m.rawData(), 0, m.numBytes());
    std::memset(v.rawData(), 0, v.numBytes());
    auto dw = toDevice(w), dm = toDevice(m), dv = toDevice(v);
    for (int64_t step = 1; step <= 3; ++step) {
      Tensor g = randomTensor(DType::F32, shape, rng);
      auto dg = toDevice(g);
      float scale = step == 2 ? 0.5f : 1.f;
      cpu::adamwUpdate(p, step, scale, w, g, m, v);
      gpu::adamw(adamwScalars(p, step, scale), dw->as<float>(), dg->as<float>(),
                 dm->as<float>(), dv->as<float>(), n, stream);
      sync();
    }
    std::string what = "adamw n=" + std::to_string(n);
    expectClose(fromDevice(*dw, DType::F32, shape), w, 1e-6, what + " w");
    expectClose(fromDevice(*dm, DType::F32, shape), m, 1e-6, what + " m");
    expectClose(fromDevice(*dv, DType::F32, shape), v, 1e-6, what + " v");
  }
}

// The clipping norm's sum of squares through CUB against the CPU's (both
// in double, in different orders).
TEST_F(CudaKernels, SumOfSquaresMatchesTheCpu) {
  for (int64_t n : {0, 1, 1000, 1 << 20}) {
    Tensor g = randomTensor(DType::F32, {n}, rng);
    auto dg = toDevice(g);
    DeviceBuffer work(gpu::sumOfSquaresWorkspace(n));
    double got = gpu::sumOfSquares(dg->as<float>(), n, work.as<char>(), stream);
    double want = cpu::sumOfSquares(g);
    EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, want)) << "n=" << n;
  }
}

// SGD on the device against the CPU update, with and without momentum and
// weight decay, over three steps (the first starts the momentum buffer).
TEST_F(CudaKernels, SgdMatchesTheCpuUpdate) {
  for (double momentum : {0.0, 0.9})
    for (double decay : {0.0, 0.01}) {
      OptimizerParams p;
      p.kind = OptimizerParams::SGD;
      p.lr = 0.1;
      p.momentum = momentum;
      p.weightDecay = decay;
      Shape shape{1031};
      Tensor w = randomTensor(DType::F32, shape, rng);
      Tensor buf(DType::F32, shape);
      std::memset(buf.rawData(), 0, buf.numBytes());
      auto dw = toDevice(w), db = toDevice(buf);
      for (int64_t step = 1; step <= 3; ++step) {
        Tensor g = randomTensor(DType::F32, shape, rng);
        auto dg = toDevice(g);
        cpu::sgdUpdate(p, step, 1.f, w, g, buf);
        gpu::sgd(sgdScalars(p, step, 1.f), dw->as<float>(), dg->as<float>(),
                 momentum != 0 ? db->as<float>() : nullptr, 1031, stream);
        sync();
      }
      std::string what = "sgd momentum " + std::to_string(momentum) +
                         " decay " + std::to_string(decay);
      expectClose(fromDevice(*dw, DType::F32, shape), w, 1e-6, what);
    }
}
