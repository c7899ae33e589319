//===- Comm.cpp - MPI communication over mesh axes --------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Comm.h"

#include "cpu/Kernels.h"

#include <fmt/format.h>

#include <climits>
#include <cstring>

using namespace shoal::rt;

namespace {

MPI_Datatype mpiType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::I64:
    return MPI_INT64_T;
  case DType::I32:
    return MPI_INT32_T;
  case DType::Bool:
  case DType::U8:
    return MPI_UINT8_T;
  case DType::F64:
    return MPI_DOUBLE;
  case DType::I8:
    return MPI_INT8_T;
  case DType::F16:
  case DType::BF16:
    // MPI has no 16-bit float type, so MPI_SUM cannot add them (allReduce
    // refuses them); moving them as pairs of bytes is right.
    return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

int mpiCount(std::size_t bytes, const char *what) {
  if (bytes > static_cast<std::size_t>(INT_MAX))
    throw Error(fmt::format("{}: blocks of {} bytes (over 2 GiB) are not "
                            "supported yet",
                            what, bytes));
  return static_cast<int>(bytes);
}

} // namespace

Comm::Comm(MPI_Comm world, const Mesh &mesh)
    : worldComm(world), meshInfo(mesh) {
  MPI_Comm_rank(world, &worldRank);
  MPI_Comm_size(world, &worldSize);
  myCoords = meshInfo.coordsOf(worldRank);
}

void Comm::setMicroBatch(int microBatch) {
  int mb = meshInfo.microBatchAxis();
  if (mb >= 0)
    myCoords[mb] = microBatch;
}

Comm::~Comm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return;
  for (auto &entry : groups)
    MPI_Comm_free(&entry.second);
}

void Comm::createGroups(const std::vector<std::vector<int>> &axesLists) {
  for (const auto &axes : axesLists)
    group(axes);
}

MPI_Comm Comm::group(const std::vector<int> &axes) {
  auto it = groups.find(axes);
  if (it != groups.end())
    return it->second;
  int color = static_cast<int>(meshInfo.groupColor(axes, myCoords));
  int key = static_cast<int>(meshInfo.blockIndex(axes, myCoords));
  MPI_Comm comm;
  MPI_Comm_split(worldComm, color, key, &comm);
  groups.emplace(axes, comm);
  return comm;
}

void Comm::allReduce(const Tensor &in, Tensor &out,
                     const std::vector<int> &axes) {
  if (in.type() != out.type())
    throw Error(fmt::format("AllReduce: output is {} but the input is {}",
                            out.type().str(), in.type().str()));
  if (in.dtype() == DType::Bool)
    throw Error("AllReduce is not supported on bool tensors");
  // TODO: a user MPI_Op (or f32 staging) to sum 16-bit floats.
  if (in.dtype() == DType::F16 || in.dtype() == DType::BF16)
    throw Error(fmt::format("AllReduce is not supported on {} tensors yet "
                            "(MPI has no 16-bit float sum)",
                            dtypeName(in.dtype())));
  if (out.rawData() != in.rawData() && in.numBytes())
    std::memcpy(out.rawData(), in.rawData(), in.numBytes());
  MPI_Comm comm = group(axes);
  // Sum in chunks so that counts fit in an int.
  std::size_t elem = dtypeSize(in.dtype());
  int64_t n = in.numElements();
  const int64_t chunk = INT_MAX / 8;
  for (int64_t off = 0; off < n; off += chunk) {
    int count = static_cast<int>(std::min<int64_t>(chunk, n - off));
    MPI_Allreduce(MPI_IN_PLACE, out.bytes() + off * elem, count,
                  mpiType(in.dtype()), MPI_SUM, comm);
  }
}

void Comm::allGather(const Tensor &in, Tensor &out, int64_t dim,
                     const std::vector<int> &axes) {
  int64_t groupSize = meshInfo.numBlocks(axes);
  if (dim < 0 || dim >= in.rank())
    throw Error(fmt::format("AllGather: dim {} is out of range for {}", dim,
                            in.type().str()));
  Shape shape = in.shape();
  shape[dim] *= groupSize;
  if (out.dtype() != in.dtype() || out.shape() != shape)
    throw Error(fmt::format("AllGather: output is {} but gathering {} from "
                            "{} ranks along dimension {} gives {}",
                            out.type().str(), in.type().str(), groupSize, dim,
                            TensorType{in.dtype(), shape}.str()));
  MPI_Comm comm = group(axes);
  int count = mpiCount(in.numBytes(), "AllGather");
  // Blocks arrive one after the other in group order; that is already the
  // layout of `out` when every dimension before `dim` has size 1.
  bool direct = true;
  for (int64_t d = 0; d < dim; ++d)
    if (shape[d] != 1)
      direct = false;
  if (direct) {
    MPI_Allgather(in.rawData(), count, MPI_BYTE, out.rawData(), count, MPI_BYTE,
                  comm);
    return;
  }
  std::vector<uint8_t> blocks(in.numBytes() * groupSize);
  MPI_Allgather(in.rawData(), count, MPI_BYTE, blocks.data(), count, MPI_BYTE,
                comm);
  cpu::concatBlocks(blocks.data(), groupSize, dim, out);
}

void Comm::allToAll(const Tensor &in, Tensor &out, int64_t splitDim,
                    int64_t concatDim, const std::vector<int> &axes) {
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
  std::vector<uint8_t> send, recv;
  Tensor piece(TensorType{in.dtype(), block});
  send.resize(piece.numBytes() * groupSize);
  recv.resize(send.size());
  for (int64_t j = 0; j < groupSize; ++j) {
    cpu::sliceBlock(in, splitDim, groupSize, j, piece);
    std::memcpy(send.data() + j * piece.numBytes(), piece.rawData(),
                piece.numBytes());
  }
  int count = mpiCount(piece.numBytes(), "AllToAll");
  MPI_Alltoall(send.data(), count, MPI_BYTE, recv.data(), count, MPI_BYTE,
               group(axes));
  cpu::concatBlocks(recv.data(), groupSize, concatDim, out);
}

void Comm::gatherToRoot(const Tensor &in, uint8_t *recv) {
  int count = mpiCount(in.numBytes(), "gathering an output");
  MPI_Gather(in.rawData(), count, MPI_BYTE, recv, count, MPI_BYTE, 0,
             worldComm);
}

void Comm::gatherBytesToRoot(const void *in, std::size_t bytes, uint8_t *recv) {
  int count = mpiCount(bytes, "gathering an output");
  MPI_Gather(in, count, MPI_BYTE, recv, count, MPI_BYTE, 0, worldComm);
}
