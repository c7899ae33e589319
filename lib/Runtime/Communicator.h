//===- Communicator.h - Collectives and point-to-point messages -*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The runtime's one communication interface, in the manner of PyTorch c10d's
// Backend: a Communicator is a group of ranks; every operation is started
// asynchronously and returns a Work handle to test or wait on. The scheduler
// and the tools talk to this interface only; MPI, NCCL and Gloo calls live in
// their implementations (comm/Mpi.cpp, cuda/Nccl.cpp, comm/Gloo.cpp) and
// nowhere else.
//
// Buffers are host memory unless deviceMemory() is true (NCCL), in which case
// they are device memory of the communicator's GPU. A scheduler with device
// tensors and a host communicator stages them through the host.
//
// Every member of a group must call a collective with the same arguments
// (counts, dtype, root), in the same order.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_COMMUNICATOR_H
#define SHOAL_RUNTIME_COMMUNICATOR_H

#include "Tensor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shoal {
namespace rt {

/// An operation in flight. Destroying a Work that has not completed waits
/// for it (so buffers are never released under a running transfer).
class Work {
public:
  virtual ~Work() = default;
  /// True once the operation has completed (its buffers may be reused).
  virtual bool test() = 0;
  /// Blocks until the operation has completed. Errors are thrown as Error.
  virtual void wait() = 0;
};

/// A Work that is already complete (operations done synchronously).
class DoneWork : public Work {
public:
  bool test() override { return true; }
  void wait() override {}
};

enum class ReduceOp { Sum, Max, Min };

/// A group of ranks and the operations among them.
class Communicator {
public:
  virtual ~Communicator() = default;

  /// This rank's index in the group, and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi", "nccl", "gloo".
  virtual std::string name() const = 0;
  /// True if buffers are device (GPU) memory rather than host memory.
  virtual bool deviceMemory() const { return false; }

  /// Splits the group: ranks with the same `color` form one new group,
  /// ordered by `key` (then by rank). Collective over this group.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  /// Reduces `count` elements of `dtype` over the group, in place.
  virtual std::unique_ptr<Work> allReduce(void *buf, int64_t count, DType dtype,
                                          ReduceOp op = ReduceOp::Sum) = 0;
  /// Concatenates every member's `bytes` bytes of `in` into `out`
  /// (size() * bytes bytes), in rank order. `in` may not alias `out`.
  virtual std::unique_ptr<Work> allGather(const void *in, void *out,
                                          std::size_t bytes) = 0;
  /// Like allGather with blocks of different sizes: member r contributes
  /// `bytes[r]` bytes, placed one after the other in rank order.
  virtual std::unique_ptr<Work>
  allGatherV(const void *in, void *out,
             const std::vector<std::size_t> &bytes) = 0;
  /// Sums the size() blocks of `count` elements in `in` over the group and
  /// leaves block rank() of the sum in `out`.
  virtual std::unique_ptr<Work> reduceScatter(const void *in, void *out,
                                              int64_t count, DType dtype) = 0;
  /// Sends block j (`bytes` bytes) of `in` to member j and receives member
  /// j's block for this rank into block j of `out`.
  virtual std::unique_ptr<Work> allToAll(const void *in, void *out,
                                         std::size_t bytes) = 0;
  /// Copies `bytes` bytes of `root`'s `buf` into every member's `buf`.
  virtual std::unique_ptr<Work> broadcast(void *buf, std::size_t bytes,
                                          int root) = 0;
  /// Gathers every member's `bytes` bytes into `out` (rank-major) on `root`;
  /// `out` may be null on other members.
  virtual std::unique_ptr<Work> gather(const void *in, void *out,
                                       std::size_t bytes, int root) = 0;
  /// Point-to-point messages, matched by (peer, tag) in order.
  virtual std::unique_ptr<Work> send(const void *buf, std::size_t bytes,
                                     int peer, int tag) = 0;
  virtual std::unique_ptr<Work> recv(void *buf, std::size_t bytes, int peer,
                                     int tag) = 0;
  /// Returns once every member has called it.
  virtual void barrier() = 0;
  /// The largest tag send/recv accept.
  virtual int maxTag() const { return (1 << 30) - 1; }

  // Conveniences over the virtual operations, blocking.
  void allReduceNow(void *buf, int64_t count, DType dtype,
                    ReduceOp op = ReduceOp::Sum) {
    allReduce(buf, count, dtype, op)->wait();
  }
  double sum(double x) {
    allReduceNow(&x, 1, DType::F64);
    return x;
  }
  double max(double x) {
    allReduceNow(&x, 1, DType::F64, ReduceOp::Max);
    return x;
  }
  int64_t min(int64_t x) {
    allReduceNow(&x, 1, DType::I64, ReduceOp::Min);
    return x;
  }
  /// Sends root's string to every member.
  std::string broadcastString(const std::string &text, int root);
};

/// How the world communicator is made.
enum class Bootstrap {
  /// mpirun (or a world of one without a launcher).
  MPI,
  /// torchrun-style environment: RANK, WORLD_SIZE, MASTER_ADDR,
  /// MASTER_PORT (and LOCAL_RANK), without MPI.
  Env,
};

/// The world's bootstrap: Env if WORLD_SIZE or RANK is set, or this is a
/// task of a Slurm step (srun without an MPI plugin), and no MPI launcher's
/// variables are (so that a launch missing one of them gets makeEnvWorld's
/// error naming it), MPI otherwise.
Bootstrap detectBootstrap();

/// True in a task that srun started (SLURM_STEP_ID and SLURM_PROCID set);
/// false in a batch script or salloc's shell, which are no step's tasks.
bool underSrun();
/// The first host of a Slurm host list ("gpu[07-12,20],cpu1" -> "gpu07"),
/// every bracket group replaced by its first element as written (zero
/// padding kept). Throws Error naming the list if it is malformed.
std::string slurmFirstHost(const std::string &hostList);
/// The rendezvous port of a Slurm step when MASTER_PORT is not set: one
/// per job and step, 20000 + (32 * job + step mod 32) mod 40000, so that the
/// steps of one job and jobs that share a node (almost always) differ.
int slurmStorePort(long jobId, long stepId);

/// The MPI world (MPI_COMM_WORLD). MPI must be initialized.
std::unique_ptr<Communicator> makeMpiWorld();
/// MPI's lifetime, for the tools (the only MPI calls outside comm/Mpi.cpp
/// go through these): MPI_Init, MPI_Finalize (once; no-op after),
/// this process's rank in MPI_COMM_WORLD, MPI_Abort of the whole job.
void mpiInit(int &argc, char **&argv);
void mpiFinalize();
int mpiWorldRank();
[[noreturn]] void mpiAbort(int status);
/// The world from the torchrun-style environment, over Gloo's TCP
/// transport, rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 serves it).
/// Throws Error naming the missing or bad variable.
std::unique_ptr<Communicator> makeEnvWorld();

/// This process's rank among the ranks on its node: LOCAL_RANK, or the
/// launcher's variables (OpenMPI, MPICH, SLURM); 0 if none is set. Throws
/// Error naming the variable if it is not a non-negative integer.
int localRankFromEnv();

/// The node of every member of `comm`: members whose host names are equal
/// share a node, numbered in order of their lowest rank. Collective.
std::vector<int> nodeOfRanks(Communicator &comm);

/// Gathers every rank's text on rank 0 of `world` (empty elsewhere); `what`
/// names it in the error when it is too large (over INT_MAX bytes in all).
/// Collective over `world`.
std::vector<std::string> gatherText(const std::string &mine,
                                    Communicator &world, const char *what);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_COMMUNICATOR_H
