//===- GlooTest.cpp - The Gloo communicator and its bootstrap ---*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// GlooWorld.* run only in a world started without MPI by test/launch_env.py
// (ctest shoal-runtime-gloo-tests: two processes with RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT); elsewhere they skip. GlooBootstrap.* run
// in one process and check the bootstrap's errors. HalfFloat.* check the
// conversions the host communicators reduce f16 and bf16 with.
//
//===----------------------------------------------------------------------===//

#include "CommunicatorSuite.h"
#include "ErrorOf.h"
#include "Half.h"
#include "comm/TcpStore.h"
#include "shoal/Runtime/Runtime.h"

#include <gtest/gtest.h>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

using namespace shoal::rt;
using namespace shoal::rt::test;

namespace {

bool launchedWithEnv() {
  return std::getenv("RANK") && std::getenv("WORLD_SIZE") &&
         !std::getenv("OMPI_COMM_WORLD_SIZE");
}

/// Sets (or with nullptr unsets) environment variables for one test and
/// restores them after.
class ScopedEnv {
public:
  explicit ScopedEnv(const std::map<std::string, const char *> &vars) {
    for (const auto &[name, value] : vars) {
      const char *old = std::getenv(name.c_str());
      saved.push_back({name, old ? std::string(old) : std::string(), !!old});
      if (value)
        setenv(name.c_str(), value, 1);
      else
        unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    for (const Saved &s : saved)
      if (s.present)
        setenv(s.name.c_str(), s.value.c_str(), 1);
      else
        unsetenv(s.name.c_str());
  }

private:
  struct Saved {
    std::string name, value;
    bool present;
  };
  std::vector<Saved> saved;
};

/// A TCP port on the loopback that nothing listens on (bound, then freed).
int unusedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

} // namespace

TEST(GlooWorld, RunsEveryOperation) {
  if (!launchedWithEnv())
    GTEST_SKIP() << "needs a torchrun-style launch (test/launch_env.py)";
  EXPECT_EQ(detectBootstrap(), Bootstrap::Env);
  std::unique_ptr<Communicator> world = makeEnvWorld();
  EXPECT_EQ(world->name(), "gloo");
  EXPECT_EQ(world->rank(), std::atoi(std::getenv("RANK")));
  EXPECT_EQ(world->size(), std::atoi(std::getenv("WORLD_SIZE")));
  EXPECT_EQ(localRankFromEnv(), std::atoi(std::getenv("LOCAL_RANK")));
  runCommunicatorSuite(*world);
  runCommSuite(*world);
  std::vector<int> node = nodeOfRanks(*world);
  EXPECT_EQ(node, std::vector<int>(world->size(), 0));
  world->barrier();
}

TEST(GlooBootstrap, MissingWorldSizeIsNamed) {
  // Without an MPI launcher's variables (MPI_Init of an earlier test in
  // this process sets some).
  ScopedEnv env({{"RANK", "0"},
                 {"WORLD_SIZE", nullptr},
                 {"OMPI_COMM_WORLD_SIZE", nullptr},
                 {"PMI_SIZE", nullptr},
                 {"PMIX_RANK", nullptr},
                 {"MPI_LOCALNRANKS", nullptr},
                 {"HYDRA_CONTROL_FD", nullptr}});
  EXPECT_EQ(detectBootstrap(), Bootstrap::Env);
  std::string e = errorOf([] { makeEnvWorld(); });
  EXPECT_NE(e.find("WORLD_SIZE is not set"), std::string::npos) << e;
}

TEST(GlooBootstrap, BadVariablesAreNamed) {
  {
    ScopedEnv env({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
    std::string e = errorOf([] { makeEnvWorld(); });
    EXPECT_NE(e.find("RANK='2' is not valid"), std::string::npos) << e;
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "two"}});
    std::string e = errorOf([] { makeEnvWorld(); });
    EXPECT_NE(e.find("WORLD_SIZE='two' is not valid"), std::string::npos) << e;
  }
  {
    ScopedEnv env(
        {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", nullptr}});
    std::string e = errorOf([] { makeEnvWorld(); });
    EXPECT_NE(e.find("MASTER_ADDR is not set"), std::string::npos) << e;
  }
  {
    ScopedEnv env({{"RANK", "1"},
                   {"WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", "70000"}});
    std::string e = errorOf([] { makeEnvWorld(); });
    EXPECT_NE(e.find("MASTER_PORT='70000' is not valid"), std::string::npos)
        << e;
  }
  {
    ScopedEnv env(
        {{"LOCAL_RANK", "-1"}, {"OMPI_COMM_WORLD_LOCAL_RANK", nullptr}});
    std::string e = errorOf([] { localRankFromEnv(); });
    EXPECT_NE(e.find("LOCAL_RANK='-1' is not valid"), std::string::npos) << e;
  }
}

TEST(GlooBootstrap, SlurmStepsStartTheEnvWorld) {
  // A task of `srun -n 2` without an MPI plugin: Slurm's variables, no
  // torchrun's and no MPI launcher's.
  ScopedEnv env({{"RANK", nullptr},
                 {"WORLD_SIZE", nullptr},
                 {"MASTER_ADDR", nullptr},
                 {"MASTER_PORT", nullptr},
                 {"OMPI_COMM_WORLD_SIZE", nullptr},
                 {"PMI_SIZE", nullptr},
                 {"PMIX_RANK", nullptr},
                 {"MPI_LOCALNRANKS", nullptr},
                 {"HYDRA_CONTROL_FD", nullptr},
                 {"SLURM_JOB_ID", "4242"},
                 {"SLURM_STEP_ID", "0"},
                 {"SLURM_PROCID", "1"},
                 {"SLURM_STEP_NUM_TASKS", "2"},
                 {"SLURM_STEP_NODELIST", "gpu[07-12,20].invalid,cpu1"},
                 {"SHOAL_RENDEZVOUS_TIMEOUT", "1"}});
  EXPECT_TRUE(underSrun());
  EXPECT_EQ(detectBootstrap(), Bootstrap::Env);
  // Rank 1 looks for rank 0 on the step's first node, at the step's port.
  std::string e = errorOf([] { makeEnvWorld(); });
  EXPECT_NE(e.find("gpu07.invalid:" + std::to_string(slurmStorePort(4242, 0))),
            std::string::npos)
      << e;
  {
    ScopedEnv badRank({{"SLURM_PROCID", "2"}, {"SLURM_LOCALID", nullptr}});
    e = errorOf([] { makeEnvWorld(); });
    EXPECT_NE(e.find("SLURM_PROCID='2' is not valid: expected this process's "
                     "rank, 0 .. SLURM_STEP_NUM_TASKS - 1"),
              std::string::npos)
        << e;
  }
  {
    // A batch script (no step): not a task of srun, so MPI's singleton.
    ScopedEnv batch({{"SLURM_STEP_ID", nullptr}, {"SLURM_LOCALID", nullptr}});
    EXPECT_FALSE(underSrun());
    EXPECT_EQ(detectBootstrap(), Bootstrap::MPI);
  }
}

TEST(GlooBootstrap, SlurmHostListsAndPorts) {
  EXPECT_EQ(slurmFirstHost("node1"), "node1");
  EXPECT_EQ(slurmFirstHost("node1,node2"), "node1");
  EXPECT_EQ(slurmFirstHost("gpu[007-012,020]"), "gpu007");
  EXPECT_EQ(slurmFirstHost("rack[2-3]-n[01,04]x,b1"), "rack2-n01x");
  EXPECT_EQ(slurmFirstHost("[5-6]"), "5");
  for (const char *bad : {"", "gpu[01", "gpu01]", "gpu[[1]]", "gpu[]", ",a"})
    EXPECT_NE(errorOf([&] { slurmFirstHost(bad); }).find("is not valid"),
              std::string::npos)
        << bad;
  // One port per step of a job, within 20000 .. 59999.
  EXPECT_EQ(slurmStorePort(0, 0), 20000);
  EXPECT_EQ(slurmStorePort(4242, 0), 20000 + 32 * 4242 % 40000);
  EXPECT_NE(slurmStorePort(4242, 1), slurmStorePort(4242, 0));
  EXPECT_NE(slurmStorePort(4243, 0), slurmStorePort(4242, 0));
  for (long job : {1L, 1249L, 1250L, 99999999L, 2147483647L})
    for (long step : {0L, 31L, 1000L}) {
      int port = slurmStorePort(job, step);
      EXPECT_GE(port, 20000);
      EXPECT_LT(port, 60000);
    }
}

TEST(GlooBootstrap, UnreachableMasterTimesOut) {
  std::string port = std::to_string(unusedPort());
  ScopedEnv env({{"RANK", "1"},
                 {"WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", port.c_str()},
                 {"SHOAL_RENDEZVOUS_TIMEOUT", "1"}});
  auto start = std::chrono::steady_clock::now();
  std::string e = errorOf([] { makeEnvWorld(); });
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_NE(e.find("cannot reach the rendezvous store at "
                   "MASTER_ADDR:MASTER_PORT 127.0.0.1:" +
                   port + " within 1 s"),
            std::string::npos)
      << e;
  EXPECT_LT(seconds, 10);
}

TEST(GlooBootstrap, StoreRefusesStrangersAndSecondRegistrations) {
  int port = unusedPort();
  auto second = std::chrono::seconds(1);
  TcpStore server("127.0.0.1", port, /*serve=*/true, second, second, "job-a",
                  0);
  // A connection that announces a 4 GiB value after its key: dropped, the
  // store serves on (once rank 0 allocated 4 GiB and died).
  {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr), 0);
    const unsigned char junk[14] = {'S', 1, 0, 0, 0, 'k', 0,
                                    0,   0, 0, 1, 0, 0,   0};
    EXPECT_EQ(send(fd, junk, sizeof junk, 0), 14);
    char c;
    EXPECT_LE(recv(fd, &c, 1, 0), 0); // closed without a reply
    close(fd);
  }
  TcpStore rank1("127.0.0.1", port, false, second, second, "job-a", 1);
  rank1.set("x", {'4', '2'});
  EXPECT_EQ(server.get("x"), (std::vector<char>{'4', '2'}));
  // Rank 1 again (a second job on the port), and a rank of another job.
  EXPECT_EQ(errorOf([&] {
              TcpStore again("127.0.0.1", port, false, second, second, "job-a",
                             1);
            }),
            "rendezvous: rank 1 has registered with this job's rendezvous "
            "store already: another job (or a second launch) uses the same "
            "MASTER_ADDR:MASTER_PORT; give each job its own MASTER_PORT "
            "(store at MASTER_ADDR:MASTER_PORT 127.0.0.1:" +
                std::to_string(port) + ")");
  EXPECT_EQ(errorOf([&] {
              TcpStore other("127.0.0.1", port, false, second, second, "job-b",
                             2);
            }),
            "rendezvous: the rendezvous store belongs to another job (job "
            "id 'job-a'; this rank's is 'job-b'): two jobs share "
            "MASTER_ADDR:MASTER_PORT (store at MASTER_ADDR:MASTER_PORT "
            "127.0.0.1:" +
                std::to_string(port) + ")");
  // The store still serves its own ranks.
  EXPECT_EQ(rank1.get("x"), (std::vector<char>{'4', '2'}));
}

TEST(GlooBootstrap, StoreServesOnMasterAddrOnly) {
  // Rank 0 binds the address MASTER_ADDR names, not every interface: an
  // address that is not this host's is an error saying so.
  auto second = std::chrono::seconds(1);
  ScopedEnv env({{"SHOAL_STORE_BIND", nullptr}});
  std::string e = errorOf([&] {
    TcpStore bad("192.0.2.1", unusedPort(), true, second, second, "", 0);
  });
  EXPECT_NE(e.find("'192.0.2.1' is not an address of this host (MASTER_ADDR "
                   "must name rank 0's host; for a virtual or NATed address "
                   "of it, set SHOAL_STORE_BIND=0.0.0.0)"),
            std::string::npos)
      << e;
  // 127.0.0.1 is served there only: 127.0.0.2 (also this host's loopback)
  // finds no store.
  int port = unusedPort();
  TcpStore server("127.0.0.1", port, true, second, second, "", 0);
  e = errorOf([&] {
    TcpStore other("127.0.0.2", port, false, std::chrono::milliseconds(300),
                   second, "", 1);
  });
  EXPECT_NE(e.find("cannot reach the rendezvous store"), std::string::npos)
      << e;
}

TEST(GlooBootstrap, StoreServesEverywhereWhenAskedOrLoopbackNamed) {
  auto second = std::chrono::seconds(1);
  {
    // SHOAL_STORE_BIND=0.0.0.0: every interface (a virtual MASTER_ADDR).
    ScopedEnv env(
        std::map<std::string, const char *>{{"SHOAL_STORE_BIND", "0.0.0.0"}});
    int port = unusedPort();
    TcpStore server("127.0.0.1", port, true, second, second, "", 0);
    TcpStore other("127.0.0.2", port, false, second, second, "", 1);
    other.set("k", {'v'});
    EXPECT_EQ(server.get("k"), std::vector<char>{'v'});
  }
  {
    ScopedEnv env(std::map<std::string, const char *>{
        {"SHOAL_STORE_BIND", "no-such-host.invalid"}});
    std::string e = errorOf([&] {
      TcpStore bad("127.0.0.1", unusedPort(), true, second, second, "", 0);
    });
    EXPECT_NE(e.find("cannot resolve 'no-such-host.invalid' "
                     "(SHOAL_STORE_BIND)"),
              std::string::npos)
        << e;
  }
  // A host name that resolves to a loopback address here (Debian's
  // /etc/hosts: 127.0.1.1) is the host's real address for the other hosts:
  // the store listens on every interface.
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  bool loopback =
      getaddrinfo(name, nullptr, &hints, &found) == 0 && found &&
      (ntohl(
           reinterpret_cast<sockaddr_in *>(found->ai_addr)->sin_addr.s_addr) >>
       24) == 127;
  if (found)
    freeaddrinfo(found);
  if (!loopback || std::string(name) == "localhost")
    GTEST_SKIP() << "this host's name does not resolve to a loopback address";
  ScopedEnv env({{"SHOAL_STORE_BIND", nullptr}});
  int port = unusedPort();
  TcpStore server(name, port, true, second, second, "", 0);
  TcpStore other("127.0.0.2", port, false, second, second, "", 1);
  other.set("k", {'w'});
  EXPECT_EQ(server.get("k"), std::vector<char>{'w'});
}

TEST(GlooBootstrap, WorldOfOneNeedsNoMaster) {
  ScopedEnv env({{"RANK", "0"},
                 {"WORLD_SIZE", "1"},
                 {"MASTER_ADDR", nullptr},
                 {"MASTER_PORT", nullptr}});
  std::unique_ptr<Communicator> world = makeEnvWorld();
  EXPECT_EQ(world->size(), 1);
  float x[2] = {1.5f, 2};
  world->allReduce(x, 2, DType::F32)->wait();
  EXPECT_EQ(x[0], 1.5f);
  std::unique_ptr<Communicator> sub = world->split(3, 0);
  EXPECT_EQ(sub->size(), 1);
  int64_t v = 5, out = 0;
  sub->allGather(&v, &out, sizeof v)->wait();
  EXPECT_EQ(out, 5);
  world->barrier();
}

TEST(HalfFloat, RoundsToNearestEven) {
  // bf16: ties go to the even mantissa.
  EXPECT_EQ(floatToBF16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBF16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(floatToBF16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);
  EXPECT_EQ(floatToBF16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(floatToBF16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBF16(std::nanf("")))));
  EXPECT_EQ(floatToBF16(INFINITY), 0x7f80);
  // f16: normal, tie, overflow, subnormal and underflow.
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-10f + 0x1p-11f), 0x3c02);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(0x1p-24f), 0x0001);
  EXPECT_EQ(floatToHalf(0x1p-25f), 0x0000);
  EXPECT_EQ(floatToHalf(0x1.8p-25f), 0x0001);
  EXPECT_EQ(floatToHalf(-0x1p-14f), 0x8400);
  EXPECT_EQ(halfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(halfToFloat(0x03ff), 0x3ffp-24f);
  EXPECT_EQ(halfToFloat(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(std::nanf("")))));
  // Every f16 survives the round trip through f32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
      continue; // NaNs
    ASSERT_EQ(floatToHalf(halfToFloat(uint16_t(h))), h) << std::hex << h;
  }
}
