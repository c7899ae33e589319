//===- CommunicatorSuite.h - One test suite for every communicator -*- C++
//-*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The operations of the Communicator interface, checked the same way on any
// implementation and any group of at least two ranks (as IREE's HAL runs one
// conformance suite against every driver). Checks use EXPECT, never ASSERT,
// so that a failing rank still joins every later collective.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_UNITTESTS_RUNTIME_COMMUNICATORSUITE_H
#define SHOAL_UNITTESTS_RUNTIME_COMMUNICATORSUITE_H

#include "Comm.h"
#include "Communicator.h"
#include "Half.h"
#include "TestUtil.h"
#include "shoal/Runtime/Runtime.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace shoal {
namespace rt {
namespace test {

/// Element i of rank r's all-reduce input, as a double (every value is
/// exact in every dtype, sums included, for up to 8 ranks).
inline double reduceInput(int r, int i) { return (r + 1) * 2 + i % 3; }

template <typename T> std::vector<T> encode(const std::vector<double> &v) {
  std::vector<T> out;
  for (double x : v)
    out.push_back(static_cast<T>(x));
  return out;
}

/// All-reduces with `op` a buffer of `count` elements of `dtype` holding
/// reduceInput and compares with the expected values.
inline void checkAllReduce(Communicator &c, DType dtype, ReduceOp op) {
  const int count = 7, n = c.size();
  std::vector<double> mine(count), want(count);
  for (int i = 0; i < count; ++i) {
    mine[i] = reduceInput(c.rank(), i);
    double acc = reduceInput(0, i);
    for (int r = 1; r < n; ++r) {
      double x = reduceInput(r, i);
      acc = op == ReduceOp::Sum   ? acc + x
            : op == ReduceOp::Max ? std::max(acc, x)
                                  : std::min(acc, x);
    }
    want[i] = acc;
  }
  std::vector<uint8_t> buf(count * dtypeSize(dtype));
  auto put = [&](auto values) {
    std::memcpy(buf.data(), values.data(), buf.size());
  };
  switch (dtype) {
  case DType::F32:
    put(encode<float>(mine));
    break;
  case DType::F64:
    put(encode<double>(mine));
    break;
  case DType::I64:
    put(encode<int64_t>(mine));
    break;
  case DType::I32:
    put(encode<int32_t>(mine));
    break;
  case DType::I8:
    put(encode<int8_t>(mine));
    break;
  case DType::U8:
    put(encode<uint8_t>(mine));
    break;
  case DType::F16:
  case DType::BF16: {
    std::vector<uint16_t> h;
    for (double x : mine)
      h.push_back(dtype == DType::F16 ? floatToHalf(float(x))
                                      : floatToBF16(float(x)));
    put(h);
    break;
  }
  case DType::Bool:
    return; // checked separately
  }
  c.allReduce(buf.data(), count, dtype, op)->wait();
  for (int i = 0; i < count; ++i) {
    double got = 0;
    const uint8_t *p = buf.data() + i * dtypeSize(dtype);
    switch (dtype) {
    case DType::F32:
      got = *reinterpret_cast<const float *>(p);
      break;
    case DType::F64:
      got = *reinterpret_cast<const double *>(p);
      break;
    case DType::I64:
      got = double(*reinterpret_cast<const int64_t *>(p));
      break;
    case DType::I32:
      got = *reinterpret_cast<const int32_t *>(p);
      break;
    case DType::I8:
      got = *reinterpret_cast<const int8_t *>(p);
      break;
    case DType::U8:
      got = *p;
      break;
    case DType::F16:
      got = halfToFloat(*reinterpret_cast<const uint16_t *>(p));
      break;
    case DType::BF16:
      got = bf16ToFloat(*reinterpret_cast<const uint16_t *>(p));
      break;
    case DType::Bool:
      break;
    }
    EXPECT_EQ(got, want[i]) << dtypeName(dtype) << " op "
                            << static_cast<int>(op) << " element " << i;
  }
}

/// In a group of exactly two, one addition: ties round to even.
inline void checkHalfRounding(Communicator &c) {
  if (c.size() != 2)
    return;
  // bf16: 1 + 2^-7 is one ulp above 1; adding 2^-8 is a tie between
  // 1 + 2^-7 and 1 + 2^-6, which rounds to the even 1 + 2^-6.
  uint16_t b = floatToBF16(c.rank() == 0 ? 1.0f + 0x1p-7f : 0x1p-8f);
  c.allReduce(&b, 1, DType::BF16)->wait();
  EXPECT_EQ(bf16ToFloat(b), 1.0f + 0x1p-6f);
  // f16: 1 + 2^-11 is a tie between 1 and 1 + 2^-10: rounds to 1.
  uint16_t h = floatToHalf(c.rank() == 0 ? 1.0f : 0x1p-11f);
  c.allReduce(&h, 1, DType::F16)->wait();
  EXPECT_EQ(halfToFloat(h), 1.0f);
}

/// Every operation of `c` (at least two ranks).
inline void runCommunicatorSuite(Communicator &c) {
  const int n = c.size(), r = c.rank();
  ASSERT_GE(n, 2);

  for (DType dtype : {DType::F32, DType::I64, DType::I32, DType::F16,
                      DType::BF16, DType::F64, DType::I8, DType::U8})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
      checkAllReduce(c, dtype, op);
  // Booleans: a sum is a logical or, min a logical and.
  uint8_t flags[2] = {uint8_t(r == 0), 1};
  c.allReduce(flags, 2, DType::Bool)->wait();
  EXPECT_EQ(flags[0], 1);
  EXPECT_EQ(flags[1], 1);
  uint8_t all = r == 0 ? 0 : 1;
  c.allReduce(&all, 1, DType::Bool, ReduceOp::Min)->wait();
  EXPECT_EQ(all, 0);
  EXPECT_EQ(c.sum(r + 0.5), n * (n - 1) / 2.0 + 0.5 * n);
  EXPECT_EQ(c.max(double(r)), double(n - 1));
  EXPECT_EQ(c.min(int64_t(r) + (int64_t(1) << 40)), int64_t(1) << 40);

  // All-gather: 3 bytes from each.
  uint8_t mine[3] = {uint8_t(r), uint8_t(10 + r), uint8_t(20 + r)};
  std::vector<uint8_t> gathered(3 * n);
  c.allGather(mine, gathered.data(), 3)->wait();
  for (int q = 0; q < n; ++q)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(gathered[3 * q + j], 10 * j + q);

  // Uneven all-gather: rank q gives q + 1 bytes, then q bytes (rank 0 none).
  for (int shift : {1, 0}) {
    std::vector<std::size_t> sizes;
    std::size_t total = 0;
    for (int q = 0; q < n; ++q) {
      sizes.push_back(q + shift);
      total += q + shift;
    }
    std::vector<uint8_t> in(r + shift), out(total, 0xff);
    for (int j = 0; j < r + shift; ++j)
      in[j] = uint8_t(16 * r + j);
    c.allGatherV(in.data(), out.data(), sizes)->wait();
    std::size_t at = 0;
    for (int q = 0; q < n; ++q)
      for (int j = 0; j < q + shift; ++j)
        EXPECT_EQ(out[at++], 16 * q + j) << "shift " << shift;
  }
  EXPECT_THROW(c.allGatherV(mine, gathered.data(), {1}), Error);

  // Reduce-scatter: n blocks of 2 int32.
  std::vector<int32_t> blocks(2 * n);
  for (int b = 0; b < n; ++b)
    for (int j = 0; j < 2; ++j)
      blocks[2 * b + j] = r + 100 * b + j;
  int32_t part[2] = {-1, -1};
  c.reduceScatter(blocks.data(), part, 2, DType::I32)->wait();
  for (int j = 0; j < 2; ++j)
    EXPECT_EQ(part[j], n * (n - 1) / 2 + n * (100 * r + j));
  // And of f32.
  std::vector<float> fblocks(n, float(r));
  float fpart = -1;
  c.reduceScatter(fblocks.data(), &fpart, 1, DType::F32)->wait();
  EXPECT_EQ(fpart, n * (n - 1) / 2.0f);

  // All-to-all: block j of rank q is 10 q + j.
  std::vector<int32_t> send(n), recv(n, -1);
  for (int j = 0; j < n; ++j)
    send[j] = 10 * r + j;
  c.allToAll(send.data(), recv.data(), sizeof(int32_t))->wait();
  for (int j = 0; j < n; ++j)
    EXPECT_EQ(recv[j], 10 * j + r);

  // Broadcast from the last rank, and a string from rank 1.
  int64_t value = r == n - 1 ? 4242 : -1;
  c.broadcast(&value, sizeof value, n - 1)->wait();
  EXPECT_EQ(value, 4242);
  EXPECT_EQ(c.broadcastString(r == 1 ? "from one" : "", 1), "from one");

  // Gather to rank 1.
  int32_t item = 7 * r;
  std::vector<int32_t> items(n, -1);
  c.gather(&item, r == 1 ? items.data() : nullptr, sizeof item, 1)->wait();
  if (r == 1) {
    for (int q = 0; q < n; ++q)
      EXPECT_EQ(items[q], 7 * q);
  }

  // Send/recv around the ring, both started before either is waited on.
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  double out = 1.5 * r, in = -1;
  auto rw = c.recv(&in, sizeof in, prev, 7);
  auto sw = c.send(&out, sizeof out, next, 7);
  sw->wait();
  rw->wait();
  EXPECT_EQ(in, 1.5 * prev);
  // An empty message still arrives.
  auto er = c.recv(nullptr, 0, prev, 8);
  c.send(nullptr, 0, next, 8)->wait();
  er->wait();
  EXPECT_THROW(c.send(&out, sizeof out, n, 1), Error);

  // test() does not block: the recv cannot complete before its sender has
  // passed the barrier, which this rank has not reached yet.
  int64_t token = -1;
  auto pending = c.recv(&token, sizeof token, prev, 9);
  EXPECT_FALSE(pending->test());
  c.barrier();
  int64_t mineToken = 100 + r;
  c.send(&mineToken, sizeof mineToken, next, 9)->wait();
  pending->wait();
  EXPECT_TRUE(pending->test());
  EXPECT_EQ(token, 100 + prev);

  // A collective started on rank 0 cannot complete before the others
  // start theirs, which they do only once rank 0 tells them to.
  float x = 1;
  if (r == 0) {
    auto w = c.allReduce(&x, 1, DType::F32);
    EXPECT_FALSE(w->test());
    std::vector<std::unique_ptr<Work>> sends;
    int go = 1;
    for (int q = 1; q < n; ++q)
      sends.push_back(c.send(&go, sizeof go, q, 11));
    w->wait();
    for (auto &s : sends)
      s->wait();
  } else {
    int go = 0;
    c.recv(&go, sizeof go, 0, 11)->wait();
    EXPECT_EQ(go, 1);
    c.allReduce(&x, 1, DType::F32)->wait();
  }
  EXPECT_EQ(x, float(n));
  // Several in flight at once complete in order.
  std::vector<int64_t> many(5);
  std::vector<std::unique_ptr<Work>> works;
  for (int k = 0; k < 5; ++k) {
    many[k] = k + r;
    works.push_back(c.allReduce(&many[k], 1, DType::I64));
  }
  for (auto &w : works)
    w->wait();
  for (int k = 0; k < 5; ++k)
    EXPECT_EQ(many[k], n * k + n * (n - 1) / 2);
  EXPECT_GE(c.maxTag(), 32767);

  // Split: even and odd ranks, ordered by descending rank.
  std::unique_ptr<Communicator> half = c.split(r % 2, -r);
  int halfSize = (n + 1 - r % 2) / 2;
  EXPECT_EQ(half->size(), halfSize);
  EXPECT_EQ(half->rank(), halfSize - 1 - r / 2);
  int64_t s = r;
  half->allReduce(&s, 1, DType::I64)->wait();
  int64_t want = 0;
  for (int q = r % 2; q < n; q += 2)
    want += q;
  EXPECT_EQ(s, want);
  // Pairs {0, 1}, {2, 3}, ...: the exact rounding of one f16/bf16 add, and
  // the whole suite's basics once more on a group of a group.
  std::unique_ptr<Communicator> pair = c.split(r / 2, r);
  if (pair->size() == 2) {
    checkHalfRounding(*pair);
    std::unique_ptr<Communicator> same = pair->split(0, pair->rank());
    EXPECT_EQ(same->size(), 2);
    EXPECT_EQ(same->sum(1.0), 2.0);
  } else {
    // An odd rank out: still joins the nested split (a group of itself).
    std::unique_ptr<Communicator> same = pair->split(0, 0);
    EXPECT_EQ(same->size(), 1);
  }
  c.barrier();
}

/// Comm's tensor collectives, blocking and asynchronous, over a mesh of one
/// axis spanning `world`.
inline void runCommSuite(Communicator &world) {
  const int n = world.size(), r = world.rank();
  Comm comm(world, Mesh({"x"}, {n}));
  // All-reduce, started asynchronously, then waited on.
  Tensor t = makeTensor<float>({2}, {float(r), 1.0f});
  std::unique_ptr<Work> w = comm.allReduceAsync(t, {0});
  w->wait();
  EXPECT_EQ(toVector<float>(t),
            (std::vector<float>{n * (n - 1) / 2.0f, float(n)}));
  // All-gather along dimension 1 of [2, 1] (blocks need unpacking): the
  // result appears once the Work completes.
  Tensor in = makeTensor<int32_t>({2, 1}, {r, 100 + r});
  Tensor out(DType::I32, {2, n});
  std::unique_ptr<Work> g = comm.allGatherAsync(in, out, 1, {0});
  while (!g->test()) {
  }
  std::vector<int32_t> want;
  for (int row = 0; row < 2; ++row)
    for (int q = 0; q < n; ++q)
      want.push_back(100 * row + q);
  EXPECT_EQ(toVector<int32_t>(out), want);
  // All-to-all: row r of a [n, n] matrix in, column r out.
  std::vector<float> row(n);
  for (int j = 0; j < n; ++j)
    row[j] = float(10 * r + j);
  Tensor a = makeTensor<float>({1, n}, row);
  Tensor b(DType::F32, {n, 1});
  comm.allToAllAsync(a, b, 1, 0, {0})->wait();
  std::vector<float> col;
  for (int q = 0; q < n; ++q)
    col.push_back(float(10 * q + r));
  EXPECT_EQ(toVector<float>(b), col);
  // The blocking forms.
  Tensor s = makeTensor<int64_t>({1}, {int64_t(r)});
  Tensor so(DType::I64, {1});
  comm.allReduce(s, so, {0});
  EXPECT_EQ(so.data<int64_t>()[0], n * (n - 1) / 2);
  Tensor gathered(DType::I32, {2 * n, 1});
  comm.allGather(in, gathered, 0, {0});
  EXPECT_EQ(toVector<int32_t>(gathered)[2 * (n - 1) + 1], 100 + n - 1);
  std::vector<int32_t> root(r == 0 ? 2 * n : 0);
  comm.gatherToRoot(in, reinterpret_cast<uint8_t *>(root.data()));
  if (r == 0) {
    EXPECT_EQ(root[2 * (n - 1)], n - 1);
  }
}

} // namespace test
} // namespace rt
} // namespace shoal

#endif // SHOAL_UNITTESTS_RUNTIME_COMMUNICATORSUITE_H
