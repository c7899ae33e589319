//===- Sharding.cpp - Mesh coordinates and block arithmetic -----*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Sharding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

using namespace shoal::rt;

Mesh::Mesh(std::vector<std::string> names, std::vector<int64_t> sizes,
           bool hasMicroBatchAxis)
    : names(std::move(names)), sizes(std::move(sizes)) {
  if (hasMicroBatchAxis)
    mbAxis = findAxis(kMicroBatchAxis);
}

int64_t Mesh::worldSize() const {
  int64_t n = 1;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    if (static_cast<int>(i) != mbAxis)
      n *= sizes[i];
  return n;
}

int64_t Mesh::numMicroBatches() const { return mbAxis < 0 ? 1 : sizes[mbAxis]; }

void Mesh::setMicroBatchShares(std::vector<int64_t> perRank) {
  shareOffset.assign(1, 0);
  for (int64_t m : perRank)
    shareOffset.push_back(shareOffset.back() + m);
}

int64_t Mesh::microBatchesOf(int64_t rank) const {
  if (shareOffset.empty() || rank < 0 ||
      rank + 1 >= static_cast<int64_t>(shareOffset.size()))
    return numMicroBatches();
  return shareOffset[rank + 1] - shareOffset[rank];
}

bool Mesh::coversShares(const std::vector<int> &axes) const {
  if (shareOffset.empty() ||
      std::find(axes.begin(), axes.end(), mbAxis) == axes.end())
    return true;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    if (static_cast<int>(i) != mbAxis && sizes[i] > 1 &&
        std::find(axes.begin(), axes.end(), static_cast<int>(i)) == axes.end())
      return false;
  return true;
}

std::vector<int64_t> Mesh::withMicroBatch(std::vector<int64_t> coords,
                                          int64_t microBatch) const {
  if (mbAxis >= 0 && mbAxis < static_cast<int>(coords.size()))
    coords[mbAxis] = microBatch;
  return coords;
}

int Mesh::findAxis(const std::string &name) const {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name)
      return static_cast<int>(i);
  return -1;
}

std::vector<int64_t> Mesh::coordsOf(int64_t rank) const {
  std::vector<int64_t> coords(sizes.size());
  for (std::size_t i = sizes.size(); i-- > 0;) {
    if (static_cast<int>(i) == mbAxis)
      continue;
    coords[i] = rank % sizes[i];
    rank /= sizes[i];
  }
  return coords;
}

int64_t Mesh::rankOf(const std::vector<int64_t> &coords) const {
  int64_t rank = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    if (static_cast<int>(i) != mbAxis)
      rank = rank * sizes[i] + coords[i];
  return rank;
}

int64_t Mesh::numBlocks(const std::vector<int> &axes) const {
  // Shares: the micro-batch axis and the device axes are one axis of S
  // blocks (coversShares holds: every device axis of size > 1 is in `axes`).
  if (!shareOffset.empty() &&
      std::find(axes.begin(), axes.end(), mbAxis) != axes.end())
    return shareOffset.back();
  int64_t n = 1;
  for (int a : axes)
    n *= sizes[a];
  return n;
}

int64_t Mesh::blockIndex(const std::vector<int> &axes,
                         const std::vector<int64_t> &coords) const {
  if (!shareOffset.empty() &&
      std::find(axes.begin(), axes.end(), mbAxis) != axes.end())
    return shareOffset[rankOf(coords)] + coords[mbAxis];
  int64_t index = 0;
  for (int a : axes)
    index = index * sizes[a] + coords[a];
  return index;
}

int64_t Mesh::groupColor(const std::vector<int> &axes,
                         const std::vector<int64_t> &coords) const {
  int64_t color = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (static_cast<int>(i) == mbAxis ||
        std::find(axes.begin(), axes.end(), static_cast<int>(i)) != axes.end())
      continue;
    color = color * sizes[i] + coords[i];
  }
  return color;
}

void Mesh::setUneven(int axis, std::vector<int64_t> weights, int64_t multiple) {
  unevenWeights.resize(sizes.size());
  unevenMultiple.resize(sizes.size(), 1);
  unevenWeights[axis] = std::move(weights);
  unevenMultiple[axis] = std::max<int64_t>(1, multiple);
}

bool Mesh::hasUnevenAxes() const {
  for (const auto &w : unevenWeights)
    if (!w.empty())
      return true;
  return false;
}

int Mesh::unevenAxisIn(const std::vector<int> &axes) const {
  for (int a : axes)
    if (isUneven(a))
      return a;
  return -1;
}

std::vector<int64_t> Mesh::unevenBlocks(int axis, int64_t size) const {
  return unevenBlockSizes(size, unevenWeights[axis], unevenMultiple[axis]);
}

std::string Mesh::str() const {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    parts.push_back(
        fmt::format("{}={}{}", names[i], sizes[i],
                    static_cast<int>(i) == mbAxis ? " (micro-batches)" : ""));
  return parts.empty() ? "(no axes)"
                       : fmt::format("{}", fmt::join(parts, ", "));
}

bool ShardSpec::uses(int axis) const {
  for (const auto &d : dims)
    if (std::find(d.begin(), d.end(), axis) != d.end())
      return true;
  return false;
}

bool ShardSpec::isReplicated() const {
  for (const auto &d : dims)
    if (!d.empty())
      return false;
  return true;
}

std::string ShardSpec::str(const Mesh &mesh) const {
  if (dims.empty())
    return "replicated";
  std::vector<std::string> parts;
  for (const auto &d : dims) {
    std::vector<std::string> axes;
    for (int a : d)
      axes.push_back(mesh.axisName(a));
    parts.push_back(fmt::format("{{{}}}", fmt::join(axes, ", ")));
  }
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

Shape shoal::rt::localShape(const Shape &global, const ShardSpec &spec,
                            const Mesh &mesh) {
  Shape local = global;
  // Uneven splits: ceil-sized blocks, the last ones zero-padded.
  for (std::size_t d = 0; d < spec.dims.size() && d < local.size(); ++d) {
    int64_t n = mesh.numBlocks(spec.dims[d]);
    local[d] = (local[d] + n - 1) / n;
  }
  return local;
}

Shape shoal::rt::localShape(const Shape &global, const ShardSpec &spec,
                            const Mesh &mesh,
                            const std::vector<int64_t> &coords) {
  Shape local = localShape(global, spec, mesh);
  for (std::size_t d = 0;
       spec.uneven && d < spec.dims.size() && d < local.size(); ++d) {
    int a = mesh.unevenAxisIn(spec.dims[d]);
    if (a >= 0)
      local[d] = mesh.unevenBlocks(a, global[d])[coords[a]];
  }
  return local;
}

Shape shoal::rt::blockOffsets(const Shape &global, const ShardSpec &spec,
                              const Mesh &mesh,
                              const std::vector<int64_t> &coords) {
  Shape offsets(global.size(), 0);
  for (std::size_t d = 0; d < spec.dims.size() && d < global.size(); ++d) {
    if (int a = spec.uneven ? mesh.unevenAxisIn(spec.dims[d]) : -1; a >= 0) {
      std::vector<int64_t> blocks = mesh.unevenBlocks(a, global[d]);
      for (int64_t i = 0; i < coords[a]; ++i)
        offsets[d] += blocks[i];
      continue;
    }
    int64_t blocks = mesh.numBlocks(spec.dims[d]);
    offsets[d] = mesh.blockIndex(spec.dims[d], coords) *
                 ((global[d] + blocks - 1) / blocks);
  }
  return offsets;
}

void shoal::rt::copyBox(const void *src, const Shape &srcShape,
                        const Shape &srcOffsets, void *dst,
                        const Shape &dstShape, const Shape &dstOffsets,
                        const Shape &boxShape, std::size_t elemSize) {
  const auto *s = static_cast<const uint8_t *>(src);
  auto *t = static_cast<uint8_t *>(dst);
  int rank = static_cast<int>(boxShape.size());
  for (int64_t b : boxShape)
    if (b == 0)
      return;
  // Byte strides of both arrays.
  std::vector<int64_t> sStride(rank), tStride(rank);
  int64_t sAcc = static_cast<int64_t>(elemSize),
          tAcc = static_cast<int64_t>(elemSize);
  for (int d = rank - 1; d >= 0; --d) {
    sStride[d] = sAcc;
    tStride[d] = tAcc;
    sAcc *= srcShape[d];
    tAcc *= dstShape[d];
  }
  int64_t sBase = 0, tBase = 0;
  for (int d = 0; d < rank; ++d) {
    sBase += srcOffsets[d] * sStride[d];
    tBase += dstOffsets[d] * tStride[d];
  }
  // Trailing dimensions that are whole in both arrays form, with the first
  // partial dimension before them, one contiguous run.
  int64_t run = static_cast<int64_t>(elemSize);
  int inner = rank - 1;
  while (inner >= 0 && boxShape[inner] == srcShape[inner] &&
         boxShape[inner] == dstShape[inner]) {
    run *= boxShape[inner];
    --inner;
  }
  if (inner < 0) {
    std::memcpy(t + tBase, s + sBase, run);
    return;
  }
  run *= boxShape[inner];
  // Odometer over the dimensions before `inner`.
  std::vector<int64_t> idx(inner, 0);
  int64_t sOff = sBase, tOff = tBase;
  while (true) {
    std::memcpy(t + tOff, s + sOff, run);
    int d = inner - 1;
    for (; d >= 0; --d) {
      ++idx[d];
      sOff += sStride[d];
      tOff += tStride[d];
      if (idx[d] < boxShape[d])
        break;
      sOff -= sStride[d] * boxShape[d];
      tOff -= tStride[d] * boxShape[d];
      idx[d] = 0;
    }
    if (d < 0)
      break;
  }
}

void shoal::rt::extractBlock(const void *src, const Shape &srcShape,
                             std::size_t elemSize, const Shape &offsets,
                             const Shape &blockShape, void *dst) {
  // A block past the end of the source (the last blocks of an uneven
  // split) is padded with zeros.
  Shape box = blockShape;
  bool clipped = false;
  for (std::size_t d = 0; d < box.size(); ++d) {
    int64_t left = std::max<int64_t>(0, srcShape[d] - offsets[d]);
    if (box[d] > left) {
      box[d] = left;
      clipped = true;
    }
  }
  if (clipped) {
    int64_t n = 1;
    for (int64_t b : blockShape)
      n *= b;
    std::memset(dst, 0, static_cast<std::size_t>(n) * elemSize);
  }
  copyBox(src, srcShape, offsets, dst, blockShape, Shape(blockShape.size(), 0),
          box, elemSize);
}

void shoal::rt::insertBlock(const void *src, const Shape &blockShape,
                            std::size_t elemSize, const Shape &offsets,
                            void *dst, const Shape &dstShape) {
  // The zero padding of an uneven block stays out.
  Shape box = blockShape;
  for (std::size_t d = 0; d < box.size(); ++d)
    box[d] = std::min(box[d], std::max<int64_t>(0, dstShape[d] - offsets[d]));
  copyBox(src, blockShape, Shape(blockShape.size(), 0), dst, dstShape, offsets,
          box, elemSize);
}

//===----------------------------------------------------------------------===//
// Blocks of tensors along one dimension
//===----------------------------------------------------------------------===//

void shoal::rt::sliceBlock(const Tensor &x, int64_t dim, int64_t numBlocks,
                           int64_t index, Tensor &out) {
  if (dim < 0 || dim >= x.rank() || numBlocks <= 0 || index < 0 ||
      index >= numBlocks)
    throw Error(fmt::format("LocalSlice: cannot take block {} of {} along "
                            "dimension {} of {}",
                            index, numBlocks, dim, x.type().str()));
  // Uneven: ceil-sized blocks, the last ones zero-padded.
  Shape shape = x.shape();
  shape[dim] = (shape[dim] + numBlocks - 1) / numBlocks;
  if (!out.defined() || out.dtype() != x.dtype() || out.shape() != shape)
    throw Error(fmt::format("LocalSlice: output is {} but the inputs give {}",
                            out.defined() ? out.type().str() : "undefined",
                            TensorType{x.dtype(), shape}.str()));
  Shape offsets(shape.size(), 0);
  offsets[dim] = index * shape[dim];
  extractBlock(x.rawData(), x.shape(), dtypeSize(x.dtype()), offsets, shape,
               out.rawData());
}

void shoal::rt::concatBlocks(const uint8_t *blocks, int64_t numBlocks,
                             int64_t dim, Tensor &out) {
  if (dim < 0 || dim >= out.rank() || numBlocks <= 0 ||
      out.shape()[dim] % numBlocks != 0)
    throw Error(fmt::format("AllGather: cannot split {} into {} blocks along "
                            "dimension {}",
                            out.type().str(), numBlocks, dim));
  concatBlocks(blocks,
               std::vector<int64_t>(numBlocks, out.shape()[dim] / numBlocks),
               dim, out);
}

void shoal::rt::concatBlocks(const uint8_t *blocks,
                             const std::vector<int64_t> &sizes, int64_t dim,
                             Tensor &out) {
  std::size_t elem = dtypeSize(out.dtype());
  Shape block = out.shape(), offsets(block.size(), 0);
  for (int64_t size : sizes) {
    block[dim] = size;
    insertBlock(blocks, block, elem, offsets, out.rawData(), out.shape());
    blocks += static_cast<std::size_t>(numElements(block)) * elem;
    offsets[dim] += size;
  }
}
