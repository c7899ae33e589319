//===- Mpi.cpp - Communicator over MPI --------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Every operation is MPI's nonblocking counterpart (MPI_Iallreduce, ...)
// wrapped in a Work that owns the requests and whatever the call needs kept
// alive until completion (count and displacement arrays). MPI counts are
// ints: an all-reduce larger than INT_MAX elements runs as several requests,
// every other operation over INT_MAX elements or bytes is an Error.
//
// f16 and bf16 have no MPI type: they travel as MPI_UINT16_T and reduce with
// user-defined operations that widen to f32 and round back to nearest even.
//
//===----------------------------------------------------------------------===//

#include "comm/Mpi.h"

#include "Comm.h"
#include "Half.h"
#include "shoal/Runtime/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>

using namespace shoal::rt;

namespace {

/// Converts `n` (elements or bytes) to an MPI count or throws naming `what`.
int mpiCount(uint64_t n, const char *what) {
  if (n > static_cast<uint64_t>(INT_MAX))
    throw Error(fmt::format("MPI {}: {} elements or bytes is over MPI's "
                            "limit of INT_MAX ({}) per call",
                            what, n, INT_MAX));
  return static_cast<int>(n);
}

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
  case DType::F16:
  case DType::BF16:
    return MPI_UINT16_T;
  case DType::F64:
    return MPI_DOUBLE;
  case DType::I8:
    return MPI_INT8_T;
  }
  throw Error(
      fmt::format("MPI: no datatype for dtype {}", static_cast<int>(dtype)));
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), int Kind>
void halfOp(void *in, void *inout, int *len, MPI_Datatype *) {
  const uint16_t *a = static_cast<const uint16_t *>(in);
  uint16_t *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = Widen(a[i]), y = Widen(b[i]);
    float r = Kind == 0 ? x + y : Kind == 1 ? std::max(x, y) : std::min(x, y);
    b[i] = Narrow(r);
  }
}

/// The user-defined operations on f16 and bf16: [f16, bf16][sum, max, min].
MPI_Op halfOps[2][3];
std::once_flag halfOpsMade;

MPI_Op mpiOp(DType dtype, ReduceOp op) {
  int kind = op == ReduceOp::Sum ? 0 : op == ReduceOp::Max ? 1 : 2;
  if (dtype == DType::F16 || dtype == DType::BF16) {
    std::call_once(halfOpsMade, [] {
      MPI_Op_create(&halfOp<halfToFloat, floatToHalf, 0>, 1, &halfOps[0][0]);
      MPI_Op_create(&halfOp<halfToFloat, floatToHalf, 1>, 1, &halfOps[0][1]);
      MPI_Op_create(&halfOp<halfToFloat, floatToHalf, 2>, 1, &halfOps[0][2]);
      MPI_Op_create(&halfOp<bf16ToFloat, floatToBF16, 0>, 1, &halfOps[1][0]);
      MPI_Op_create(&halfOp<bf16ToFloat, floatToBF16, 1>, 1, &halfOps[1][1]);
      MPI_Op_create(&halfOp<bf16ToFloat, floatToBF16, 2>, 1, &halfOps[1][2]);
    });
    return halfOps[dtype == DType::F16 ? 0 : 1][kind];
  }
  // A sum of booleans is their logical or.
  if (dtype == DType::Bool && kind == 0)
    return MPI_LOR;
  return kind == 0 ? MPI_SUM : kind == 1 ? MPI_MAX : MPI_MIN;
}

class MpiWork : public Work {
public:
  ~MpiWork() override {
    if (!requests.empty())
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(),
                  MPI_STATUSES_IGNORE);
  }
  bool test() override {
    if (requests.empty())
      return true;
    int done = 0;
    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                MPI_STATUSES_IGNORE);
    if (done)
      requests.clear();
    return done != 0;
  }
  void wait() override {
    if (requests.empty())
      return;
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(),
                MPI_STATUSES_IGNORE);
    requests.clear();
  }
  MPI_Request *add() {
    requests.push_back(MPI_REQUEST_NULL);
    return &requests.back();
  }
  /// Count and displacement arrays of a v-collective, kept until done.
  std::vector<int> counts, displs;

private:
  std::vector<MPI_Request> requests;
};

class MpiCommunicator : public Communicator {
public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm(comm), owned(owned) {
    MPI_Comm_rank(comm, &myRank);
    MPI_Comm_size(comm, &mySize);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned && !finalized)
      MPI_Comm_free(&comm);
  }

  int rank() const override { return myRank; }
  int size() const override { return mySize; }
  std::string name() const override { return "mpi"; }
  MPI_Comm handle() const { return comm; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    if (color < 0)
      throw Error(fmt::format("MPI split: color {} is negative", color));
    MPI_Comm sub;
    MPI_Comm_split(comm, color, key, &sub);
    return std::make_unique<MpiCommunicator>(sub, true);
  }

  std::unique_ptr<Work> allReduce(void *buf, int64_t count, DType dtype,
                                  ReduceOp op) override {
    auto work = std::make_unique<MpiWork>();
    MPI_Datatype type = mpiType(dtype);
    MPI_Op mop = mpiOp(dtype, op);
    std::size_t elem = dtypeSize(dtype);
    // Requests of one communicator complete in order: chunks keep the
    // counts within int.
    const int64_t chunk = INT_MAX;
    for (int64_t off = 0; off < count; off += chunk) {
      int n = static_cast<int>(std::min<int64_t>(chunk, count - off));
      MPI_Iallreduce(MPI_IN_PLACE, static_cast<char *>(buf) + off * elem, n,
                     type, mop, comm, work->add());
    }
    return work;
  }

  std::unique_ptr<Work> allGather(const void *in, void *out,
                                  std::size_t bytes) override {
    auto work = std::make_unique<MpiWork>();
    int n = mpiCount(bytes, "all-gather");
    mpiCount(uint64_t(bytes) * mySize, "all-gather (output)");
    MPI_Iallgather(in, n, MPI_BYTE, out, n, MPI_BYTE, comm, work->add());
    return work;
  }

  std::unique_ptr<Work>
  allGatherV(const void *in, void *out,
             const std::vector<std::size_t> &bytes) override {
    if (static_cast<int>(bytes.size()) != mySize)
      throw Error(fmt::format("MPI all-gather-v: {} block sizes for a group "
                              "of {}",
                              bytes.size(), mySize));
    auto work = std::make_unique<MpiWork>();
    uint64_t total = 0;
    for (std::size_t b : bytes) {
      work->counts.push_back(mpiCount(b, "all-gather-v"));
      work->displs.push_back(mpiCount(total, "all-gather-v (offset)"));
      total += b;
    }
    MPI_Iallgatherv(in, work->counts[myRank], MPI_BYTE, out,
                    work->counts.data(), work->displs.data(), MPI_BYTE, comm,
                    work->add());
    return work;
  }

  std::unique_ptr<Work> reduceScatter(const void *in, void *out, int64_t count,
                                      DType dtype) override {
    auto work = std::make_unique<MpiWork>();
    int n = mpiCount(static_cast<uint64_t>(count), "reduce-scatter");
    MPI_Ireduce_scatter_block(in, out, n, mpiType(dtype),
                              mpiOp(dtype, ReduceOp::Sum), comm, work->add());
    return work;
  }

  std::unique_ptr<Work> allToAll(const void *in, void *out,
                                 std::size_t bytes) override {
    auto work = std::make_unique<MpiWork>();
    int n = mpiCount(bytes, "all-to-all");
    mpiCount(uint64_t(bytes) * mySize, "all-to-all (buffer)");
    MPI_Ialltoall(in, n, MPI_BYTE, out, n, MPI_BYTE, comm, work->add());
    return work;
  }

  std::unique_ptr<Work> broadcast(void *buf, std::size_t bytes,
                                  int root) override {
    checkPeer(root, "broadcast root");
    auto work = std::make_unique<MpiWork>();
    MPI_Ibcast(buf, mpiCount(bytes, "broadcast"), MPI_BYTE, root, comm,
               work->add());
    return work;
  }

  std::unique_ptr<Work> gather(const void *in, void *out, std::size_t bytes,
                               int root) override {
    checkPeer(root, "gather root");
    auto work = std::make_unique<MpiWork>();
    int n = mpiCount(bytes, "gather");
    mpiCount(uint64_t(bytes) * mySize, "gather (output)");
    MPI_Igather(in, n, MPI_BYTE, out, n, MPI_BYTE, root, comm, work->add());
    return work;
  }

  std::unique_ptr<Work> send(const void *buf, std::size_t bytes, int peer,
                             int tag) override {
    checkPeer(peer, "send peer");
    checkTag(tag);
    auto work = std::make_unique<MpiWork>();
    MPI_Isend(buf, mpiCount(bytes, "send"), MPI_BYTE, peer, tag, comm,
              work->add());
    return work;
  }

  std::unique_ptr<Work> recv(void *buf, std::size_t bytes, int peer,
                             int tag) override {
    checkPeer(peer, "recv peer");
    checkTag(tag);
    auto work = std::make_unique<MpiWork>();
    MPI_Irecv(buf, mpiCount(bytes, "recv"), MPI_BYTE, peer, tag, comm,
              work->add());
    return work;
  }

  void barrier() override { MPI_Barrier(comm); }

  int maxTag() const override {
    void *value = nullptr;
    int has = 0;
    MPI_Comm_get_attr(comm, MPI_TAG_UB, &value, &has);
    return has && value ? *static_cast<int *>(value) : 32767;
  }

private:
  void checkPeer(int peer, const char *what) const {
    if (peer < 0 || peer >= mySize)
      throw Error(fmt::format("MPI {} {} is out of range for a group of {}",
                              what, peer, mySize));
  }
  void checkTag(int tag) const {
    if (tag < 0 || tag > maxTag())
      throw Error(
          fmt::format("MPI tag {} is out of range [0, {}]", tag, maxTag()));
  }

  MPI_Comm comm;
  bool owned;
  int myRank = 0, mySize = 1;
};

} // namespace

std::unique_ptr<Communicator> shoal::rt::makeMpiWorld() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    throw Error("the MPI world needs MPI to be initialized (MPI_Init)");
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
}

MPI_Comm shoal::rt::mpiCommOf(Communicator &comm) {
  if (auto *mpi = dynamic_cast<MpiCommunicator *>(&comm))
    return mpi->handle();
  return MPI_COMM_NULL;
}

void shoal::rt::mpiInit(int &argc, char **&argv) { MPI_Init(&argc, &argv); }

void shoal::rt::mpiFinalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

int shoal::rt::mpiWorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void shoal::rt::mpiAbort(int status) {
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status); // MPI_Abort does not return
}
