//===- Comm.cpp - Communication over mesh axes ------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Comm.h"

#include <fmt/format.h>

#include <cstring>
#include <functional>

using namespace shoal::rt;

namespace {

/// A collective's Work followed by a step on this rank (unpacking received
/// blocks) once it has completed; owns the buffers both need.
class ThenWork : public Work {
public:
  ThenWork(std::unique_ptr<Work> inner, std::function<void()> then)
      : inner(std::move(inner)), then(std::move(then)) {}
  ~ThenWork() override {
    try {
      wait();
    } catch (...) {
      // Destruction must not throw; the error was the caller's to see.
    }
  }
  bool test() override {
    if (finished)
      return true;
    if (!inner->test())
      return false;
    finish();
    return true;
  }
  void wait() override {
    if (finished)
      return;
    inner->wait();
    finish();
  }

  std::vector<uint8_t> sendBuf, recvBuf;
  std::vector<Tensor> keep;

private:
  void finish() {
    finished = true;
    if (then)
      then();
  }
  std::unique_ptr<Work> inner;
  std::function<void()> then;
  bool finished = false;
};

} // namespace

Comm::Comm(Communicator &world, const Mesh &mesh)
    : worldComm(world), meshInfo(mesh) {
  worldRank = world.rank();
  worldSize = world.size();
  myCoords = meshInfo.coordsOf(worldRank);
}

Comm::~Comm() = default;

void Comm::setMicroBatch(int microBatch) {
  int mb = meshInfo.microBatchAxis();
  if (mb >= 0)
    myCoords[mb] = microBatch;
}

void Comm::createGroups(const std::vector<std::vector<int>> &axesLists) {
  for (const auto &axes : axesLists)
    group(axes);
}

Communicator &Comm::group(const std::vector<int> &axes) {
  auto it = groups.find(axes);
  if (it != groups.end())
    return *it->second;
  int color = static_cast<int>(meshInfo.groupColor(axes, myCoords));
  int key = static_cast<int>(meshInfo.blockIndex(axes, myCoords));
  std::unique_ptr<Communicator> comm = worldComm.split(color, key);
  Communicator &ref = *comm;
  groups.emplace(axes, std::move(comm));
  return ref;
}

std::unique_ptr<Work>
Comm::allReduceAsync(Tensor &inout, const std::vector<int> &axes, ReduceOp op) {
  if (inout.dtype() == DType::Bool)
    throw Error("AllReduce is not supported on bool tensors");
  auto work = group(axes).allReduce(inout.rawData(), inout.numElements(),
                                    inout.dtype(), op);
  auto then = std::make_unique<ThenWork>(std::move(work), nullptr);
  then->keep.push_back(inout);
  return then;
}

void Comm::allReduce(const Tensor &in, Tensor &out,
                     const std::vector<int> &axes) {
  if (in.type() != out.type())
    throw Error(fmt::format("AllReduce: output is {} but the input is {}",
                            out.type().str(), in.type().str()));
  if (in.dtype() == DType::Bool)
    throw Error("AllReduce is not supported on bool tensors");
  if (out.rawData() != in.rawData() && in.numBytes())
    std::memcpy(out.rawData(), in.rawData(), in.numBytes());
  allReduceAsync(out, axes)->wait();
}

std::unique_ptr<Work> Comm::allGatherAsync(const Tensor &in, Tensor &out,
                                           int64_t dim,
                                           const std::vector<int> &axes,
                                           const std::vector<int64_t> &sizes) {
  int64_t groupSize = meshInfo.numBlocks(axes);
  if (dim < 0 || dim >= in.rank())
    throw Error(fmt::format("AllGather: dim {} is out of range for {}", dim,
                            in.type().str()));
  if (!sizes.empty()) {
    // Uneven blocks: member g sends sizes[g] slices of dimension `dim`.
    Shape shape = in.shape();
    int64_t total = 0;
    for (int64_t b : sizes)
      total += b;
    shape[dim] = total;
    if (static_cast<int64_t>(sizes.size()) != groupSize ||
        out.dtype() != in.dtype() || out.shape() != shape)
      throw Error(fmt::format("AllGather: output is {} but gathering blocks "
                              "[{}] of {} along dimension {} gives {}",
                              out.type().str(), fmt::join(sizes, ", "),
                              in.type().str(), dim,
                              TensorType{in.dtype(), shape}.str()));
    // Bytes of one entry of dimension `dim`.
    Shape one = in.shape();
    one[dim] = 1;
    std::size_t slice =
        static_cast<std::size_t>(numElements(one)) * dtypeSize(in.dtype());
    std::vector<std::size_t> bytes;
    for (int64_t b : sizes)
      bytes.push_back(static_cast<std::size_t>(b) * slice);
    Communicator &comm = group(axes);
    auto packed = std::make_shared<std::vector<uint8_t>>(out.numBytes() + 1);
    Tensor result = out;
    auto then = std::make_unique<ThenWork>(
        comm.allGatherV(in.rawData(), packed->data(), bytes),
        [packed, sizes, dim, result]() mutable {
          concatBlocks(packed->data(), sizes, dim, result);
        });
    then->keep = {in};
    return then;
  }
  Shape shape = in.shape();
  shape[dim] *= groupSize;
  if (out.dtype() != in.dtype() || out.shape() != shape)
    throw Error(fmt::format("AllGather: output is {} but gathering {} from "
                            "{} ranks along dimension {} gives {}",
                            out.type().str(), in.type().str(), groupSize, dim,
                            TensorType{in.dtype(), shape}.str()));
  Communicator &comm = group(axes);
  // Blocks arrive one after the other in group order; that is already the
  // layout of `out` when every dimension before `dim` has size 1.
  bool direct = true;
  for (int64_t d = 0; d < dim; ++d)
    if (shape[d] != 1)
      direct = false;
  if (direct) {
    auto then = std::make_unique<ThenWork>(
        comm.allGather(in.rawData(), out.rawData(), in.numBytes()), nullptr);
    then->keep = {in, out};
    return then;
  }
  auto blocks =
      std::make_shared<std::vector<uint8_t>>(in.numBytes() * groupSize);
  Tensor result = out;
  auto then = std::make_unique<ThenWork>(
      comm.allGather(in.rawData(), blocks->data(), in.numBytes()),
      [blocks, groupSize, dim, result]() mutable {
        concatBlocks(blocks->data(), groupSize, dim, result);
      });
  then->keep = {in};
  return then;
}

void Comm::reduceScatter(const Tensor &in, Tensor &out, int64_t dim,
                         const std::vector<int> &axes) {
  int64_t n = meshInfo.numBlocks(axes);
  if (in.rank() == 0 || in.dtype() == DType::Bool || dim < 0 ||
      dim >= in.rank())
    throw Error(fmt::format("ReduceScatter: cannot scatter {} along dim {}",
                            in.type().str(), dim));
  int64_t size = in.shape()[dim];
  int64_t block = (size + n - 1) / n;
  Shape shape = in.shape();
  shape[dim] = block;
  if (out.dtype() != in.dtype() || out.shape() != shape)
    throw Error(fmt::format("ReduceScatter: output is {} but scattering {} "
                            "along dim {} over {} ranks gives {}",
                            out.type().str(), in.type().str(), dim, n,
                            TensorType{in.dtype(), shape}.str()));
  // [outer, size, inner] -> rank j's block [outer, block, inner] contiguous
  // at j (zero-padded past the end): a copy unless dim is 0 and even.
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= in.shape()[d];
  for (int64_t d = dim + 1; d < in.rank(); ++d)
    inner *= in.shape()[d];
  std::size_t elem = dtypeSize(in.dtype());
  int64_t blockElems = outer * block * inner;
  const void *src = in.rawData();
  std::vector<uint8_t> packed;
  if (block * n != size || (outer > 1 && n > 1)) {
    packed.assign(static_cast<std::size_t>(n * blockElems) * elem, 0);
    const auto *from = static_cast<const uint8_t *>(in.rawData());
    for (int64_t j = 0; j < n; ++j) {
      int64_t rows = std::min(block, size - j * block);
      if (rows <= 0)
        continue;
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(packed.data() + ((j * outer + o) * block * inner) * elem,
                    from + ((o * size + j * block) * inner) * elem,
                    static_cast<std::size_t>(rows * inner) * elem);
    }
    src = packed.data();
  }
  group(axes).reduceScatter(src, out.rawData(), blockElems, in.dtype())->wait();
}

void Comm::allGather(const Tensor &in, Tensor &out, int64_t dim,
                     const std::vector<int> &axes,
                     const std::vector<int64_t> &blocks) {
  allGatherAsync(in, out, dim, axes, blocks)->wait();
}

std::unique_ptr<Work> Comm::allToAllAsync(const Tensor &in, Tensor &out,
                                          int64_t splitDim, int64_t concatDim,
                                          const std::vector<int> &axes) {
  int64_t groupSize = meshInfo.numBlocks(axes);
  Shape block = in.shape();
  if (splitDim < 0 || splitDim >= in.rank() || concatDim < 0 ||
      concatDim >= in.rank() || block[splitDim] % groupSize != 0)
    throw Error(fmt::format("AllToAll: cannot split dimension {} of {} into "
                            "{} blocks",
                            splitDim, in.type().str(), groupSize));
  block[splitDim] /= groupSize;
  Shape shape = block;
  shape[concatDim] *= groupSize;
  if (out.dtype() != in.dtype() || out.shape() != shape)
    throw Error(fmt::format("AllToAll: output is {} but expected {}",
                            out.type().str(),
                            TensorType{in.dtype(), shape}.str()));
  // Block j of the split dimension goes to member j, packed densely.
  auto send = std::make_shared<std::vector<uint8_t>>();
  auto recv = std::make_shared<std::vector<uint8_t>>();
  Tensor piece(TensorType{in.dtype(), block});
  send->resize(piece.numBytes() * groupSize);
  recv->resize(send->size());
  for (int64_t j = 0; j < groupSize; ++j) {
    sliceBlock(in, splitDim, groupSize, j, piece);
    std::memcpy(send->data() + j * piece.numBytes(), piece.rawData(),
                piece.numBytes());
  }
  Tensor result = out;
  return std::make_unique<ThenWork>(
      group(axes).allToAll(send->data(), recv->data(), piece.numBytes()),
      [send, recv, groupSize, concatDim, result]() mutable {
        concatBlocks(recv->data(), groupSize, concatDim, result);
      });
}

void Comm::allToAll(const Tensor &in, Tensor &out, int64_t splitDim,
                    int64_t concatDim, const std::vector<int> &axes) {
  allToAllAsync(in, out, splitDim, concatDim, axes)->wait();
}

void Comm::gatherToRoot(const Tensor &in, uint8_t *recv) {
  gatherBytesToRoot(in.rawData(), in.numBytes(), recv);
}

void Comm::gatherBytesToRoot(const void *in, std::size_t bytes, uint8_t *recv) {
  worldComm.gather(in, recv, bytes, 0)->wait();
}
