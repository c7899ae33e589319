//===- Gloo.cpp - Communicator over Gloo's TCP transport --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The world of a torchrun-style launch (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT): rank 0 serves a TcpStore, every rank publishes its Gloo
// address there and connects to every other (gloo::rendezvous::Context).
//
// Gloo's collectives block, so each communicator runs them, in the order
// they were started, on a worker thread of its own; a Work is a ticket for
// that queue and test() only looks at a flag. Send and recv go straight to
// Gloo's unbound buffers (the transport's loop thread moves the data); a
// small thread per message waits for its completion so that test() does
// not block either. split() gathers every member's (color, key) and
// connects the new group through a PrefixStore on the same store.
//
//===----------------------------------------------------------------------===//

#include "Communicator.h"

#include "Half.h"
#include "comm/TcpStore.h"
#include "shoal/Runtime/Error.h"

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <thread>

using namespace shoal::rt;

namespace {

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

template <typename T, int Kind>
void reduceInto(void *c, const void *a, const void *b, size_t n) {
  T *out = static_cast<T *>(c);
  const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
  for (size_t i = 0; i < n; ++i)
    out[i] = Kind == 0   ? static_cast<T>(x[i] + y[i])
             : Kind == 1 ? std::max(x[i], y[i])
                         : std::min(x[i], y[i]);
}

void orInto(void *c, const void *a, const void *b, size_t n) {
  uint8_t *out = static_cast<uint8_t *>(c);
  const uint8_t *x = static_cast<const uint8_t *>(a),
                *y = static_cast<const uint8_t *>(b);
  for (size_t i = 0; i < n; ++i)
    out[i] = (x[i] || y[i]) ? 1 : 0;
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), int Kind>
void reduceHalfInto(void *c, const void *a, const void *b, size_t n) {
  uint16_t *out = static_cast<uint16_t *>(c);
  const uint16_t *x = static_cast<const uint16_t *>(a),
                 *y = static_cast<const uint16_t *>(b);
  for (size_t i = 0; i < n; ++i) {
    float p = Widen(x[i]), q = Widen(y[i]);
    out[i] = Narrow(Kind == 0   ? p + q
                    : Kind == 1 ? std::max(p, q)
                                : std::min(p, q));
  }
}

template <int Kind> gloo::AllreduceOptions::Func reduceFunc(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return &reduceInto<float, Kind>;
  case DType::F64:
    return &reduceInto<double, Kind>;
  case DType::I64:
    return &reduceInto<int64_t, Kind>;
  case DType::I32:
    return &reduceInto<int32_t, Kind>;
  case DType::I8:
    return &reduceInto<int8_t, Kind>;
  case DType::U8:
    return &reduceInto<uint8_t, Kind>;
  case DType::Bool:
    // A sum of booleans is their logical or.
    return Kind == 0 ? &orInto : &reduceInto<uint8_t, Kind>;
  case DType::F16:
    return &reduceHalfInto<halfToFloat, floatToHalf, Kind>;
  case DType::BF16:
    return &reduceHalfInto<bf16ToFloat, floatToBF16, Kind>;
  }
  throw Error("Gloo: unknown dtype");
}

gloo::AllreduceOptions::Func reduceFunc(DType dtype, ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return reduceFunc<0>(dtype);
  case ReduceOp::Max:
    return reduceFunc<1>(dtype);
  case ReduceOp::Min:
    return reduceFunc<2>(dtype);
  }
  throw Error("Gloo: unknown reduction");
}

/// Gloo's options are typed by element; only the element's size matters
/// here (the reduction function knows the type).
template <typename Fn> void bySize(std::size_t elem, Fn &&fn) {
  switch (elem) {
  case 1:
    return fn(uint8_t());
  case 2:
    return fn(uint16_t());
  case 4:
    return fn(uint32_t());
  case 8:
    return fn(uint64_t());
  }
  throw Error(fmt::format("Gloo: no element type of {} bytes", elem));
}

//===----------------------------------------------------------------------===//
// Work
//===----------------------------------------------------------------------===//

/// One queued operation and its outcome.
struct Task {
  std::function<void()> run;
  std::mutex mutex;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::string error;

  void finish(std::string message) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      error = std::move(message);
      done = true;
    }
    cv.notify_all();
  }
  void await() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return done.load(); });
  }
};

class TaskWork : public Work {
public:
  explicit TaskWork(std::shared_ptr<Task> task) : task(std::move(task)) {}
  ~TaskWork() override { task->await(); }
  bool test() override {
    if (!task->done)
      return false;
    check();
    return true;
  }
  void wait() override {
    task->await();
    check();
  }

private:
  void check() {
    if (!task->error.empty())
      throw Error(task->error);
  }
  std::shared_ptr<Task> task;
};

/// A send or recv: the unbound buffer and a thread that waits for it.
class MessageWork : public Work {
public:
  MessageWork(std::unique_ptr<uint8_t> scratch,
              std::unique_ptr<gloo::transport::UnboundBuffer> buffer,
              bool isSend, std::string what)
      : scratch(std::move(scratch)), buffer(std::move(buffer)),
        task(std::make_shared<Task>()) {
    waiter = std::thread([b = this->buffer.get(), t = task, isSend, what] {
      try {
        if (isSend)
          b->waitSend();
        else
          b->waitRecv();
        t->finish("");
      } catch (const std::exception &e) {
        t->finish(fmt::format("Gloo {}: {}", what, e.what()));
      }
    });
  }
  ~MessageWork() override { waiter.join(); }
  bool test() override {
    if (!task->done)
      return false;
    wait();
    return true;
  }
  void wait() override {
    task->await();
    if (!task->error.empty())
      throw Error(task->error);
  }

private:
  /// The byte an empty message carries; outlives the buffer over it.
  std::unique_ptr<uint8_t> scratch;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  std::shared_ptr<Task> task;
  std::thread waiter;
};

//===----------------------------------------------------------------------===//
// The communicator
//===----------------------------------------------------------------------===//

/// What the communicators of one world share.
struct GlooShared {
  std::shared_ptr<gloo::rendezvous::Store> store;
  std::shared_ptr<gloo::transport::Device> device;
  /// How long an operation may wait, and how long connecting may.
  std::chrono::milliseconds timeout, connectTimeout;
};

class GlooCommunicator : public Communicator {
public:
  GlooCommunicator(std::shared_ptr<GlooShared> shared,
                   std::shared_ptr<gloo::Context> context, std::string prefix)
      : shared(std::move(shared)), context(std::move(context)),
        prefix(std::move(prefix)) {
    worker = std::thread([this] { workLoop(); });
  }
  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    cv.notify_all();
    worker.join();
  }

  int rank() const override { return context->rank; }
  int size() const override { return context->size; }
  std::string name() const override { return "gloo"; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    if (color < 0)
      throw Error(fmt::format("Gloo split: color {} is negative", color));
    int32_t mine[2] = {color, key};
    std::vector<int32_t> all(2 * size());
    allGather(mine, all.data(), sizeof mine)->wait();
    std::vector<std::pair<int32_t, int>> members;
    for (int r = 0; r < size(); ++r)
      if (all[2 * r] == color)
        members.push_back({all[2 * r + 1], r});
    std::sort(members.begin(), members.end());
    int subRank = 0;
    for (std::size_t i = 0; i < members.size(); ++i)
      if (members[i].second == rank())
        subRank = static_cast<int>(i);
    std::string subPrefix =
        fmt::format("{}/split{}.{}", prefix, splits++, color);
    auto sub = std::make_shared<gloo::rendezvous::Context>(
        subRank, static_cast<int>(members.size()));
    sub->setTimeout(shared->connectTimeout);
    gloo::rendezvous::PrefixStore store(subPrefix, *shared->store);
    try {
      sub->connectFullMesh(store, shared->device);
      sub->setTimeout(shared->timeout);
    } catch (const Error &) {
      throw;
    } catch (const std::exception &e) {
      throw Error(fmt::format("Gloo split (color {}): {}", color, e.what()));
    }
    return std::make_unique<GlooCommunicator>(shared, std::move(sub),
                                              subPrefix);
  }

  std::unique_ptr<Work> allReduce(void *buf, int64_t count, DType dtype,
                                  ReduceOp op) override {
    auto fn = reduceFunc(dtype, op);
    std::size_t elem = dtypeSize(dtype);
    return enqueue("all-reduce", [=] {
      if (count == 0 || size() == 1)
        return;
      gloo::AllreduceOptions opts(context);
      bySize(elem, [&](auto t) {
        using T = decltype(t);
        opts.setOutput(static_cast<T *>(buf), static_cast<size_t>(count));
      });
      opts.setReduceFunction(fn);
      gloo::allreduce(opts);
    });
  }

  std::unique_ptr<Work> allGather(const void *in, void *out,
                                  std::size_t bytes) override {
    return enqueue("all-gather", [=] {
      if (bytes == 0)
        return;
      if (size() == 1) {
        std::memcpy(out, in, bytes);
        return;
      }
      gloo::AllgatherOptions opts(context);
      opts.setInput(static_cast<uint8_t *>(const_cast<void *>(in)), bytes);
      opts.setOutput(static_cast<uint8_t *>(out), bytes * size());
      gloo::allgather(opts);
    });
  }

  std::unique_ptr<Work>
  allGatherV(const void *in, void *out,
             const std::vector<std::size_t> &bytes) override {
    if (static_cast<int>(bytes.size()) != size())
      throw Error(fmt::format("Gloo all-gather-v: {} block sizes for a group "
                              "of {}",
                              bytes.size(), size()));
    return enqueue("all-gather-v", [=] {
      std::size_t total = 0;
      for (std::size_t b : bytes)
        total += b;
      if (total == 0)
        return;
      if (size() == 1) {
        std::memcpy(out, in, total);
        return;
      }
      // Gloo wants a non-empty input buffer object even for empty blocks.
      uint8_t dummy = 0;
      std::size_t mine = bytes[rank()];
      gloo::AllgathervOptions opts(context);
      opts.setInput(
          mine ? static_cast<uint8_t *>(const_cast<void *>(in)) : &dummy, mine);
      opts.setOutput(static_cast<uint8_t *>(out), bytes);
      gloo::allgatherv(opts);
    });
  }

  std::unique_ptr<Work> reduceScatter(const void *in, void *out, int64_t count,
                                      DType dtype) override {
    // Gloo has no reduce-scatter in this API: all-reduce a copy and keep
    // this rank's block.
    auto fn = reduceFunc(dtype, ReduceOp::Sum);
    std::size_t elem = dtypeSize(dtype);
    return enqueue("reduce-scatter", [=] {
      std::size_t block = static_cast<std::size_t>(count) * elem;
      if (block == 0)
        return;
      std::vector<uint8_t> all(block * size());
      std::memcpy(all.data(), in, all.size());
      if (size() > 1) {
        gloo::AllreduceOptions opts(context);
        bySize(elem, [&](auto t) {
          using T = decltype(t);
          opts.setOutput(reinterpret_cast<T *>(all.data()),
                         static_cast<size_t>(count) * size());
        });
        opts.setReduceFunction(fn);
        gloo::allreduce(opts);
      }
      std::memcpy(out, all.data() + block * rank(), block);
    });
  }

  std::unique_ptr<Work> allToAll(const void *in, void *out,
                                 std::size_t bytes) override {
    return enqueue("all-to-all", [=] {
      if (bytes == 0)
        return;
      if (size() == 1) {
        std::memcpy(out, in, bytes);
        return;
      }
      gloo::AlltoallOptions opts(context);
      opts.setInput(static_cast<uint8_t *>(const_cast<void *>(in)),
                    bytes * size());
      opts.setOutput(static_cast<uint8_t *>(out), bytes * size());
      gloo::alltoall(opts);
    });
  }

  std::unique_ptr<Work> broadcast(void *buf, std::size_t bytes,
                                  int root) override {
    checkPeer(root, "broadcast root");
    return enqueue("broadcast", [=] {
      if (bytes == 0 || size() == 1)
        return;
      gloo::BroadcastOptions opts(context);
      opts.setOutput(static_cast<uint8_t *>(buf), bytes);
      opts.setRoot(root);
      gloo::broadcast(opts);
    });
  }

  std::unique_ptr<Work> gather(const void *in, void *out, std::size_t bytes,
                               int root) override {
    checkPeer(root, "gather root");
    return enqueue("gather", [=] {
      if (bytes == 0)
        return;
      if (size() == 1) {
        std::memcpy(out, in, bytes);
        return;
      }
      gloo::GatherOptions opts(context);
      opts.setInput(static_cast<uint8_t *>(const_cast<void *>(in)), bytes);
      if (rank() == root)
        opts.setOutput(static_cast<uint8_t *>(out), bytes * size());
      opts.setRoot(root);
      gloo::gather(opts);
    });
  }

  std::unique_ptr<Work> send(const void *buf, std::size_t bytes, int peer,
                             int tag) override {
    checkPeer(peer, "send peer");
    checkTag(tag);
    return message(const_cast<void *>(buf), bytes, peer, tag, true);
  }

  std::unique_ptr<Work> recv(void *buf, std::size_t bytes, int peer,
                             int tag) override {
    checkPeer(peer, "recv peer");
    checkTag(tag);
    return message(buf, bytes, peer, tag, false);
  }

  void barrier() override {
    enqueue("barrier", [=] {
      if (size() == 1)
        return;
      gloo::BarrierOptions opts(context);
      gloo::barrier(opts);
    })->wait();
  }

  int maxTag() const override { return INT_MAX; }

private:
  std::unique_ptr<Work> enqueue(const char *what, std::function<void()> fn) {
    auto task = std::make_shared<Task>();
    task->run = [this, what, fn = std::move(fn), t = task.get()] {
      try {
        fn();
        t->finish("");
      } catch (const std::exception &e) {
        t->finish(fmt::format("Gloo {} (rank {} of {}): {}", what, rank(),
                              size(), e.what()));
      }
    };
    {
      std::lock_guard<std::mutex> lock(mutex);
      queue.push_back(task);
    }
    cv.notify_one();
    return std::make_unique<TaskWork>(std::move(task));
  }

  void workLoop() {
    while (true) {
      std::shared_ptr<Task> task;
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty())
          return;
        task = std::move(queue.front());
        queue.pop_front();
      }
      task->run();
      task->run = nullptr;
    }
  }

  std::unique_ptr<Work> message(void *buf, std::size_t bytes, int peer, int tag,
                                bool isSend) {
    // Gloo rejects empty buffers: an empty message still synchronizes, as
    // with MPI, by carrying one byte.
    auto scratch = std::make_unique<uint8_t>(0);
    void *ptr = bytes ? buf : scratch.get();
    std::size_t n = bytes ? bytes : 1;
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    try {
      buffer = context->createUnboundBuffer(ptr, n);
      // User slots sit below every slot Gloo's collectives build (those
      // carry a prefix byte in the top bits).
      if (isSend)
        buffer->send(peer, static_cast<uint64_t>(tag));
      else
        buffer->recv(peer, static_cast<uint64_t>(tag));
    } catch (const std::exception &e) {
      throw Error(fmt::format("Gloo {} to rank {}, tag {}: {}",
                              isSend ? "send" : "recv", peer, tag, e.what()));
    }
    return std::make_unique<MessageWork>(
        std::move(scratch), std::move(buffer), isSend,
        fmt::format("{} {} rank {}, tag {}", isSend ? "send" : "recv",
                    isSend ? "to" : "from", peer, tag));
  }

  void checkPeer(int peer, const char *what) const {
    if (peer < 0 || peer >= size())
      throw Error(fmt::format("Gloo {} {} is out of range for a group of {}",
                              what, peer, size()));
  }
  void checkTag(int tag) const {
    if (tag < 0)
      throw Error(fmt::format("Gloo tag {} is negative", tag));
  }

  std::shared_ptr<GlooShared> shared;
  std::shared_ptr<gloo::Context> context;
  std::string prefix;
  int splits = 0;
  std::thread worker;
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Task>> queue;
  bool stopping = false;
};

//===----------------------------------------------------------------------===//
// Bootstrap from the environment
//===----------------------------------------------------------------------===//

/// Which launch a variable belongs to, for its errors.
std::string launchOf(const char *name) {
  return std::string(name).rfind("SLURM_", 0) == 0
             ? "a task of a Slurm step (srun)"
             : "the torchrun-style launch (RANK, WORLD_SIZE, MASTER_ADDR, "
               "MASTER_PORT)";
}

/// The integer in environment variable `name`, in [lo, hi]; throws Error
/// naming the variable if it is missing (and `required`) or malformed.
long envInt(const char *name, long lo, long hi, const char *meaning,
            bool required, long fallback) {
  const char *v = std::getenv(name);
  if (!v || !*v) {
    if (!required)
      return fallback;
    throw Error(fmt::format("{} is not set: {} needs {}", name, launchOf(name),
                            meaning));
  }
  char *end = nullptr;
  errno = 0;
  long n = std::strtol(v, &end, 10);
  if (*end != '\0' || errno || n < lo || n > hi)
    throw Error(fmt::format("{}='{}' is not valid: expected {} (an integer "
                            "from {} to {})",
                            name, v, meaning, lo, hi));
  return n;
}

bool isLoopback(const std::string &host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

/// The variable that says `torchName`'s value: itself when set or outside
/// srun, else the first of Slurm's `slurmNames` that is set.
const char *launchVar(const char *torchName,
                      std::initializer_list<const char *> slurmNames) {
  const char *v = std::getenv(torchName);
  if ((v && *v) || !underSrun())
    return torchName;
  for (const char *name : slurmNames)
    if (const char *s = std::getenv(name); s && *s)
      return name;
  return torchName;
}

} // namespace

std::unique_ptr<Communicator> shoal::rt::makeEnvWorld() {
  // torchrun's variables, or Slurm's in a task srun started.
  bool srun = underSrun();
  const char *sizeVar =
      launchVar("WORLD_SIZE", {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  const char *rankVar = launchVar("RANK", {"SLURM_PROCID"});
  long size = envInt(sizeVar, 1, INT_MAX, "the number of ranks", true, 1);
  std::string rankMeaning =
      fmt::format("this process's rank, 0 .. {} - 1", sizeVar);
  long rank = envInt(rankVar, 0, size - 1, rankMeaning.c_str(), true, 0);
  localRankFromEnv(); // checks LOCAL_RANK if set
  auto shared = std::make_shared<GlooShared>();
  long timeoutS = envInt("SHOAL_COMM_TIMEOUT", 1, 86400,
                         "seconds a collective may wait", false, 1800);
  shared->timeout = std::chrono::seconds(timeoutS);
  long connectS = envInt("SHOAL_RENDEZVOUS_TIMEOUT", 1, 86400,
                         "seconds to wait for the rendezvous", false, 60);
  shared->connectTimeout = std::chrono::seconds(connectS);
  std::string host = "127.0.0.1";
  if (size > 1) {
    const char *addr = std::getenv("MASTER_ADDR");
    const char *nodes = nullptr;
    if (srun)
      for (const char *var :
           {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
        if (const char *v = std::getenv(var); v && *v && !nodes)
          nodes = v;
    if (addr && *addr)
      host = addr;
    else if (nodes) // srun: task 0 runs on the step's first node
      host = slurmFirstHost(nodes);
    else
      throw Error("MASTER_ADDR is not set: the torchrun-style launch (RANK, "
                  "WORLD_SIZE, MASTER_ADDR, MASTER_PORT) needs the host name "
                  "or address of rank 0, which serves the rendezvous store");
    long port = 0;
    const char *masterPort = std::getenv("MASTER_PORT");
    if (srun && !(masterPort && *masterPort) &&
        !std::getenv("SHOAL_STORE_PORT"))
      port = slurmStorePort(
          envInt("SLURM_JOB_ID", 0, LONG_MAX, "Slurm's job id", true, 0),
          envInt("SLURM_STEP_ID", 0, LONG_MAX, "Slurm's step id", true, 0));
    else if (!std::getenv("SHOAL_STORE_PORT"))
      port =
          envInt("MASTER_PORT", 1, 65535,
                 "the TCP port rank 0 serves the rendezvous store on", true, 0);
    // torchrun's agent holds MASTER_PORT with its own store: shoal's goes
    // on the next port (SHOAL_STORE_PORT sets another).
    const char *agentStore = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (agentStore && std::string(agentStore) == "True" && port < 65535)
      ++port;
    if (std::getenv("SHOAL_STORE_PORT"))
      port = envInt("SHOAL_STORE_PORT", 1, 65535,
                    "the TCP port of shoal's rendezvous store", true, 0);
    // The job's id, when the launcher gives one: ranks of another job that
    // reach this store are refused.
    // (The same names as the checkpoints' run id, SHOAL_RUN_ID included.)
    std::string jobId;
    for (const char *var : {"SHOAL_JOB_ID", "SHOAL_RUN_ID",
                            "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"})
      if (const char *v = std::getenv(var); v && *v) {
        jobId = v;
        break;
      }
    // The steps of one Slurm job are jobs of their own.
    if (const char *slurmJob = std::getenv("SLURM_JOB_ID");
        srun && slurmJob && jobId == slurmJob)
      jobId += std::string(".") + std::getenv("SLURM_STEP_ID");
    shared->store = std::make_shared<TcpStore>(
        host, static_cast<int>(port), rank == 0, std::chrono::seconds(connectS),
        std::chrono::seconds(connectS), jobId, static_cast<int>(rank));
  } else {
    shared->store = std::make_shared<gloo::rendezvous::HashStore>();
  }
  // The address this rank's Gloo device listens on: an interface the user
  // names, the loopback when the master is local, else this host's name.
  gloo::transport::tcp::attr attr;
  if (const char *iface = std::getenv("GLOO_SOCKET_IFNAME"))
    attr.iface = iface;
  else if (isLoopback(host))
    attr.hostname = "127.0.0.1";
  else {
    char name[256] = {0};
    ::gethostname(name, sizeof name - 1);
    attr.hostname = name;
  }
  try {
    shared->device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(
        static_cast<int>(rank), static_cast<int>(size));
    context->setTimeout(shared->connectTimeout);
    gloo::rendezvous::PrefixStore store("shoal/world", *shared->store);
    context->connectFullMesh(store, shared->device);
    context->setTimeout(shared->timeout);
    return std::make_unique<GlooCommunicator>(shared, std::move(context),
                                              "shoal/world");
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    throw Error(fmt::format("cannot connect the Gloo world (rank {} of {}): "
                            "{}",
                            rank, size, e.what()));
  }
}
