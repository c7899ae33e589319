//===- Nccl.cpp - The NCCL communicator -------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Collectives among GPUs through NCCL, on a stream of their own. Each
// operation waits (on the GPU) for the work enqueued on the device's compute
// stream before it, so it reads finished values; its Work completes when the
// communication stream has passed it. The unique id is broadcast over a host
// communicator (MPI or Gloo), so NCCL runs under mpirun and under
// torchrun-style launchers alike. Buffers are device memory.
//
//===----------------------------------------------------------------------===//

#include "Communicator.h"
#include "Device.h"
#include "PollWait.h"

#include "cuda/Backend.h"
#include "cuda/CudaDevice.h"

#include <fmt/format.h>
#include <nccl.h>

#include <memory>
#include <string>

using namespace shoal::rt;
using namespace shoal::rt::cuda;

namespace {

void checkNccl(ncclResult_t r, const char *what) {
  if (r != ncclSuccess)
    throw Error(fmt::format("{}: {}", what, ncclGetErrorString(r)));
}

ncclDataType_t ncclTypeOf(DType t) {
  switch (t) {
  case DType::F32:
    return ncclFloat32;
  case DType::F64:
    return ncclFloat64;
  case DType::F16:
    return ncclFloat16;
  case DType::BF16:
    return ncclBfloat16;
  case DType::I64:
    return ncclInt64;
  case DType::I32:
    return ncclInt32;
  case DType::I8:
    return ncclInt8;
  case DType::U8:
  case DType::Bool:
    return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t ncclOpOf(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return ncclSum;
  case ReduceOp::Max:
    return ncclMax;
  case ReduceOp::Min:
    return ncclMin;
  }
  return ncclSum;
}

/// A communicator and whether it was aborted (shared by its Work objects),
/// and a flag shared by every communicator split from the same world: when
/// one fails, the others abort at their next wait instead of waiting on a
/// peer that is gone.
struct NcclState {
  ncclComm_t comm = nullptr;
  bool aborted = false;
  std::shared_ptr<bool> jobFailed = std::make_shared<bool>(false);
};

/// Aborts the communicator (its handle is gone after).
void abortComm(NcclState &state) {
  if (state.aborted)
    return;
  ncclCommAbort(state.comm);
  state.comm = nullptr;
  state.aborted = true;
  *state.jobFailed = true;
}

/// The communicator's asynchronous error ("" while there is none): a peer
/// that died or a network failure, or the failure of another communicator
/// of the job. The communicator is then aborted, so that no later call
/// waits on it.
std::string asyncError(NcclState &state) {
  if (state.aborted)
    return "the NCCL communicator was aborted after an earlier failure";
  if (*state.jobFailed) {
    abortComm(state);
    return "another NCCL communicator of this job failed (its error came "
           "first)";
  }
  ncclResult_t r = ncclSuccess;
  if (ncclCommGetAsyncError(state.comm, &r) != ncclSuccess)
    return "";
  if (r == ncclSuccess || r == ncclInProgress)
    return "";
  std::string why = fmt::format(
      "the NCCL communicator failed ({}: {}); a peer rank may have died or "
      "lost its network, and the job ends here (NCCL_DEBUG=WARN names the "
      "peer)",
      ncclGetErrorString(r), ncclGetLastError(state.comm));
  abortComm(state);
  return why;
}

/// Completes when the communication stream passes its event; a wait polls
/// the event and, every millisecond, the communicator's asynchronous error
/// (pollUntilReady), so a failed peer ends it with NCCL's error.
class NcclWork : public Work {
public:
  NcclWork(cudaEvent_t event, std::shared_ptr<NcclState> state)
      : event(event), state(std::move(state)) {}
  ~NcclWork() override {
    // Waits for the work (its buffers may be freed next), but ends with the
    // communicator's failure rather than waiting for ever; errors are
    // reported by wait() and test(), not here.
    try {
      wait();
    } catch (...) {
    }
    cudaEventDestroy(event);
  }
  bool test() override {
    if (done)
      return true;
    cudaError_t e = cudaEventQuery(event);
    if (e == cudaErrorNotReady) {
      if (std::string why = asyncError(*state); !why.empty())
        throw Error("NCCL operation: " + why);
      return false;
    }
    check(e, "NCCL operation");
    done = true;
    return true;
  }
  void wait() override {
    if (done)
      return;
    pollUntilReady(
        [&] {
          cudaError_t e = cudaEventQuery(event);
          if (e == cudaErrorNotReady)
            return false;
          check(e, "NCCL operation");
          return true;
        },
        [&] { return asyncError(*state); }, "NCCL operation");
    done = true;
  }

private:
  cudaEvent_t event;
  std::shared_ptr<NcclState> state;
  bool done = false;
};

class NcclCommunicator : public Communicator {
public:
  /// `jobFailed`: the flag of the world this communicator is split from
  /// (null for a world).
  NcclCommunicator(ncclComm_t c, int rank, int size, cudaStream_t compute,
                   std::shared_ptr<bool> jobFailed = nullptr)
      : state(std::make_shared<NcclState>()), comm(c), myRank(rank),
        mySize(size), compute(compute) {
    state->comm = c;
    if (jobFailed)
      state->jobFailed = std::move(jobFailed);
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
          "cudaStreamCreate");
  }
  ~NcclCommunicator() override {
    // Drains the stream, ending at the communicator's failure (or another
    // one's) rather than waiting for ever; an aborted communicator's
    // handle is gone.
    try {
      pollUntilReady(
          [&] { return cudaStreamQuery(stream) != cudaErrorNotReady; },
          [&] { return asyncError(*state); }, "NCCL shutdown");
    } catch (...) {
    }
    if (!state->aborted)
      ncclCommDestroy(comm);
    cudaStreamDestroy(stream);
  }

  int rank() const override { return myRank; }
  int size() const override { return mySize; }
  std::string name() const override { return "nccl"; }
  bool deviceMemory() const override { return true; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    if (state->aborted || *state->jobFailed)
      throw Error("ncclCommSplit: the NCCL communicator was aborted after an "
                  "earlier failure");
    ncclComm_t sub;
    checkNccl(ncclCommSplit(comm, color, key, &sub, nullptr), "ncclCommSplit");
    int r = 0, n = 0;
    checkNccl(ncclCommUserRank(sub, &r), "ncclCommUserRank");
    checkNccl(ncclCommCount(sub, &n), "ncclCommCount");
    return std::make_unique<NcclCommunicator>(sub, r, n, compute,
                                              state->jobFailed);
  }

  std::unique_ptr<Work> allReduce(void *buf, int64_t count, DType dtype,
                                  ReduceOp op) override {
    return enqueue([&] {
      checkNccl(ncclAllReduce(buf, buf, count, ncclTypeOf(dtype), ncclOpOf(op),
                              comm, stream),
                "ncclAllReduce");
    });
  }
  std::unique_ptr<Work> allGather(const void *in, void *out,
                                  std::size_t bytes) override {
    return enqueue([&] {
      checkNccl(ncclAllGather(in, out, bytes, ncclUint8, comm, stream),
                "ncclAllGather");
    });
  }
  std::unique_ptr<Work>
  allGatherV(const void *in, void *out,
             const std::vector<std::size_t> &bytes) override {
    return enqueue([&] {
      // Uneven blocks: one broadcast per member, grouped.
      checkNccl(ncclGroupStart(), "ncclGroupStart");
      std::size_t offset = 0;
      for (int r = 0; r < mySize; ++r) {
        char *dst = static_cast<char *>(out) + offset;
        checkNccl(ncclBroadcast(r == myRank ? in : dst, dst, bytes[r],
                                ncclUint8, r, comm, stream),
                  "ncclBroadcast");
        offset += bytes[r];
      }
      checkNccl(ncclGroupEnd(), "ncclGroupEnd");
    });
  }
  std::unique_ptr<Work> reduceScatter(const void *in, void *out, int64_t count,
                                      DType dtype) override {
    return enqueue([&] {
      checkNccl(ncclReduceScatter(in, out, count, ncclTypeOf(dtype), ncclSum,
                                  comm, stream),
                "ncclReduceScatter");
    });
  }
  std::unique_ptr<Work> allToAll(const void *in, void *out,
                                 std::size_t bytes) override {
    return enqueue([&] {
      checkNccl(ncclGroupStart(), "ncclGroupStart");
      for (int r = 0; r < mySize; ++r) {
        checkNccl(ncclSend(static_cast<const char *>(in) + r * bytes, bytes,
                           ncclUint8, r, comm, stream),
                  "ncclSend");
        checkNccl(ncclRecv(static_cast<char *>(out) + r * bytes, bytes,
                           ncclUint8, r, comm, stream),
                  "ncclRecv");
      }
      checkNccl(ncclGroupEnd(), "ncclGroupEnd");
    });
  }
  std::unique_ptr<Work> broadcast(void *buf, std::size_t bytes,
                                  int root) override {
    return enqueue([&] {
      checkNccl(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm, stream),
                "ncclBroadcast");
    });
  }
  std::unique_ptr<Work> gather(const void *in, void *out, std::size_t bytes,
                               int root) override {
    return enqueue([&] {
      checkNccl(ncclGroupStart(), "ncclGroupStart");
      if (myRank == root)
        for (int r = 0; r < mySize; ++r)
          checkNccl(ncclRecv(static_cast<char *>(out) + r * bytes, bytes,
                             ncclUint8, r, comm, stream),
                    "ncclRecv");
      checkNccl(ncclSend(in, bytes, ncclUint8, root, comm, stream), "ncclSend");
      checkNccl(ncclGroupEnd(), "ncclGroupEnd");
    });
  }
  std::unique_ptr<Work> send(const void *buf, std::size_t bytes, int peer,
                             int) override {
    return enqueue([&] {
      checkNccl(ncclSend(buf, bytes, ncclUint8, peer, comm, stream),
                "ncclSend");
    });
  }
  std::unique_ptr<Work> recv(void *buf, std::size_t bytes, int peer,
                             int) override {
    return enqueue([&] {
      checkNccl(ncclRecv(buf, bytes, ncclUint8, peer, comm, stream),
                "ncclRecv");
    });
  }
  void barrier() override {
    int *one = nullptr;
    check(cudaMalloc(&one, sizeof(int)), "cudaMalloc");
    std::unique_ptr<int, cudaError_t (*)(void *)> owned(one, cudaFree);
    allReduce(one, 1, DType::I32, ReduceOp::Sum)->wait();
  }

private:
  /// Orders `f`'s work after the compute stream's and returns its Work.
  template <typename F> std::unique_ptr<Work> enqueue(F &&f) {
    if (std::string why = state->aborted || *state->jobFailed
                              ? asyncError(*state)
                              : std::string();
        !why.empty())
      throw Error("NCCL operation: " + why);
    cudaEvent_t ready, done;
    check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
          "cudaEventCreate");
    check(cudaEventRecord(ready, compute), "cudaEventRecord");
    check(cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);
    f();
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
          "cudaEventCreate");
    check(cudaEventRecord(done, stream), "cudaEventRecord");
    return std::make_unique<NcclWork>(done, state);
  }

  std::shared_ptr<NcclState> state;
  ncclComm_t comm;
  int myRank, mySize;
  cudaStream_t compute;
  cudaStream_t stream = nullptr;
};

} // namespace

std::unique_ptr<Communicator> shoal::rt::makeNcclWorld(Communicator &bootstrap,
                                                       Device &device) {
  auto *gpu = dynamic_cast<CudaDevice *>(&device);
  if (!gpu)
    throw Error("--comm nccl needs --backend cuda");
  ncclUniqueId id;
  if (bootstrap.rank() == 0)
    checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  bootstrap.broadcast(&id, sizeof(id), 0)->wait();
  ncclComm_t comm;
  checkNccl(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()),
            "ncclCommInitRank");
  return std::make_unique<NcclCommunicator>(comm, bootstrap.rank(),
                                            bootstrap.size(), gpu->stream());
}
