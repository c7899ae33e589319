//===- TcpStore.cpp - A key-value store over TCP for rendezvous -*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The wire format: a request is a command byte, a u32 key length and the
// key, then for 'S' (set) a u64 value length and the value, for 'G' (get)
// and 'W' (wait) a u64 timeout in milliseconds. The reply is one status
// byte: 'K' (done), 'V' followed by a u64 length and the value (get), or
// 'T' (the key did not appear in time). Integers are little-endian.
// A connection starts with a hello: 'H', the job id as the key, a u64
// rank; the reply is 'K', or 'X' followed by a u64 length and the reason
// it is refused (another job, or a rank registered twice). Keys are at
// most kMaxKey bytes and values kMaxValue: a request past them closes the
// connection (no allocation on a stranger's say-so).
//
//===----------------------------------------------------------------------===//

#include "comm/TcpStore.h"

#include "shoal/Runtime/Error.h"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <thread>

using namespace shoal::rt;
using Clock = std::chrono::steady_clock;

namespace {

/// Rendezvous keys and values are small (Gloo's addresses, a few KiB).
constexpr uint32_t kMaxKey = 4096;
constexpr uint64_t kMaxValue = uint64_t(16) << 20;

bool writeAll(int fd, const void *data, std::size_t n) {
  const char *p = static_cast<const char *>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool readAll(int fd, void *data, std::size_t n) {
  char *p = static_cast<char *>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

template <typename T> bool writeInt(int fd, T v) {
  unsigned char b[sizeof(T)];
  for (std::size_t i = 0; i < sizeof(T); ++i)
    b[i] = static_cast<unsigned char>(v >> (8 * i));
  return writeAll(fd, b, sizeof b);
}

template <typename T> bool readInt(int fd, T &v) {
  unsigned char b[sizeof(T)];
  if (!readAll(fd, b, sizeof b))
    return false;
  v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<T>(b[i]) << (8 * i);
  return true;
}

/// Whether `addr` is a loopback address (127.0.0.0/8, ::1, or an IPv4
/// loopback mapped into IPv6).
bool isLoopback(const sockaddr *addr) {
  if (addr->sa_family == AF_INET) {
    uint32_t a =
        ntohl(reinterpret_cast<const sockaddr_in *>(addr)->sin_addr.s_addr);
    return (a >> 24) == 127;
  }
  if (addr->sa_family == AF_INET6) {
    const in6_addr &a = reinterpret_cast<const sockaddr_in6 *>(addr)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a))
      return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

/// Whether `host` means this host's loopback everywhere: `localhost` or a
/// loopback literal (a job that runs on this host only).
bool isLoopbackName(const std::string &host) {
  if (host == "localhost" || host.rfind("localhost.", 0) == 0)
    return true;
  in_addr a4;
  in6_addr a6;
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1)
    return (ntohl(a4.s_addr) >> 24) == 127;
  return ::inet_pton(AF_INET6, host.c_str(), &a6) == 1 &&
         IN6_IS_ADDR_LOOPBACK(&a6);
}

} // namespace

namespace shoal {
namespace rt {

/// The map and the threads that serve it: one accepting, one per client.
class TcpStoreServer {
public:
  TcpStoreServer(const std::string &host, int port, const std::string &where,
                 std::string jobId)
      : jobId(std::move(jobId)) {
    // The address MASTER_ADDR names (an IPv4 one first: clients try every
    // address the name resolves to), not every interface of the host;
    // SHOAL_STORE_BIND chooses another (0.0.0.0: every interface, for a
    // MASTER_ADDR that is a virtual or NATed address of this host).
    const char *bindVar = std::getenv("SHOAL_STORE_BIND");
    std::string bindHost = bindVar && *bindVar ? bindVar : host;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo *found = nullptr;
    int rc = ::getaddrinfo(bindHost.c_str(), std::to_string(port).c_str(),
                           &hints, &found);
    if (rc != 0)
      throw Error(fmt::format("cannot serve the rendezvous store at {}: "
                              "cannot resolve '{}'{}: {}",
                              where, bindHost,
                              bindVar && *bindVar ? " (SHOAL_STORE_BIND)" : "",
                              gai_strerror(rc)));
    addrinfo *pick = found;
    for (addrinfo *a = found; a; a = a->ai_next)
      if (a->ai_family == AF_INET) {
        pick = a;
        break;
      }
    // A host name that resolves to a loopback address here (Debian's
    // /etc/hosts maps the host's own name to 127.0.1.1) is the host's real
    // address elsewhere: the other hosts could not reach a loopback
    // listener, so the store listens on every interface.
    sockaddr_storage wildcard{};
    socklen_t wildcardLen = 0;
    if (!(bindVar && *bindVar) && isLoopback(pick->ai_addr) &&
        !isLoopbackName(host)) {
      if (pick->ai_family == AF_INET) {
        auto *in = reinterpret_cast<sockaddr_in *>(&wildcard);
        in->sin_family = AF_INET;
        in->sin_port = htons(static_cast<uint16_t>(port));
        in->sin_addr.s_addr = htonl(INADDR_ANY);
        wildcardLen = sizeof(sockaddr_in);
      } else {
        auto *in6 = reinterpret_cast<sockaddr_in6 *>(&wildcard);
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(static_cast<uint16_t>(port));
        in6->sin6_addr = in6addr_any;
        wildcardLen = sizeof(sockaddr_in6);
      }
    }
    listenFd = ::socket(pick->ai_family, pick->ai_socktype, pick->ai_protocol);
    if (listenFd < 0) {
      std::string why = std::strerror(errno);
      ::freeaddrinfo(found);
      throw Error(fmt::format("cannot serve the rendezvous store at {}: "
                              "socket: {}",
                              where, why));
    }
    int one = 1;
    ::setsockopt(listenFd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    rc = wildcardLen ? ::bind(listenFd, reinterpret_cast<sockaddr *>(&wildcard),
                              wildcardLen)
                     : ::bind(listenFd, pick->ai_addr, pick->ai_addrlen);
    int err = errno;
    ::freeaddrinfo(found);
    if (rc != 0 || ::listen(listenFd, 128) != 0) {
      if (rc == 0)
        err = errno;
      ::close(listenFd);
      if (err == EADDRNOTAVAIL)
        throw Error(fmt::format("rank 0 cannot serve the rendezvous store at "
                                "{}: '{}' is not an address of this host "
                                "(MASTER_ADDR must name rank 0's host; for "
                                "a virtual or NATed address of it, set "
                                "SHOAL_STORE_BIND=0.0.0.0)",
                                where, bindHost));
      throw Error(fmt::format("rank 0 cannot serve the rendezvous store on "
                              "port {} ({}): {} (is the port free? MASTER_PORT "
                              "or SHOAL_STORE_PORT sets another; under "
                              "torchrun, shoal serves it on MASTER_PORT + 1, "
                              "under srun on one derived from the job)",
                              port, where, std::strerror(err)));
    }
    acceptor = std::thread([this] { acceptLoop(); });
  }

  ~TcpStoreServer() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
      for (int fd : clients)
        ::shutdown(fd, SHUT_RDWR);
    }
    cv.notify_all();
    ::shutdown(listenFd, SHUT_RDWR);
    ::close(listenFd);
    acceptor.join();
    for (std::thread &t : workers)
      t.join();
  }

private:
  void acceptLoop() {
    while (true) {
      int fd = ::accept(listenFd, nullptr, nullptr);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED)
          continue;
        return;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard<std::mutex> lock(mutex);
      if (stopping) {
        ::close(fd);
        return;
      }
      clients.push_back(fd);
      workers.emplace_back([this, fd] { serve(fd); });
    }
  }

  void serve(int fd) {
    try {
      while (handle(fd)) {
      }
    } catch (...) {
      // A request the server cannot hold (out of memory): drop the client,
      // keep serving the others.
    }
    // Forget the descriptor before closing it, so that shutting down never
    // reaches a socket that reuses its number.
    std::lock_guard<std::mutex> lock(mutex);
    clients.erase(std::find(clients.begin(), clients.end(), fd));
    greeted.erase(fd);
    ::close(fd);
  }

  /// Answers one request; false when the client is gone.
  bool handle(int fd) {
    char cmd;
    uint32_t keyLen;
    if (!readAll(fd, &cmd, 1) || !readInt(fd, keyLen) || keyLen > kMaxKey)
      return false;
    std::string key(keyLen, '\0');
    if (!readAll(fd, key.data(), keyLen))
      return false;
    if (cmd == 'H')
      return greet(fd, key);
    // Nothing before the hello.
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!greeted.count(fd))
        return false;
    }
    if (cmd == 'S') {
      uint64_t len;
      if (!readInt(fd, len) || len > kMaxValue)
        return false;
      std::vector<char> value(len);
      if (!readAll(fd, value.data(), len))
        return false;
      {
        std::lock_guard<std::mutex> lock(mutex);
        map[key] = std::move(value);
      }
      cv.notify_all();
      char ok = 'K';
      return writeAll(fd, &ok, 1);
    }
    if (cmd != 'G' && cmd != 'W')
      return false;
    uint64_t timeoutMs;
    if (!readInt(fd, timeoutMs))
      return false;
    std::unique_lock<std::mutex> lock(mutex);
    bool found = cv.wait_for(lock, std::chrono::milliseconds(timeoutMs),
                             [&] { return stopping || map.count(key) > 0; });
    if (!found || stopping) {
      lock.unlock();
      char t = 'T';
      return writeAll(fd, &t, 1);
    }
    if (cmd == 'W') {
      lock.unlock();
      char ok = 'K';
      return writeAll(fd, &ok, 1);
    }
    std::vector<char> value = map[key];
    lock.unlock();
    char v = 'V';
    return writeAll(fd, &v, 1) && writeInt<uint64_t>(fd, value.size()) &&
           writeAll(fd, value.data(), value.size());
  }

  /// The hello: the client's job must be ours and its rank not yet
  /// registered by another connection.
  bool greet(int fd, const std::string &theirJob) {
    uint64_t rank;
    if (!readInt(fd, rank))
      return false;
    std::string refused;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (theirJob != jobId) {
        refused = fmt::format(
            "the rendezvous store belongs to another job (job id '{}'; this "
            "rank's is '{}'): two jobs share MASTER_ADDR:MASTER_PORT",
            jobId, theirJob);
      } else if (rank != uint64_t(-1) && ranks.count(rank)) {
        refused = fmt::format(
            "rank {} has registered with this job's rendezvous store "
            "already: another job (or a second launch) uses the same "
            "MASTER_ADDR:MASTER_PORT; give each job its own MASTER_PORT",
            rank);
      } else {
        if (rank != uint64_t(-1))
          ranks.insert(rank);
        greeted.insert(fd);
      }
    }
    if (refused.empty()) {
      char ok = 'K';
      return writeAll(fd, &ok, 1);
    }
    char x = 'X';
    writeAll(fd, &x, 1) && writeInt<uint64_t>(fd, refused.size()) &&
        writeAll(fd, refused.data(), refused.size());
    return false;
  }

  std::string jobId;
  std::set<uint64_t> ranks;
  std::set<int> greeted;
  int listenFd = -1;
  std::thread acceptor;
  std::vector<std::thread> workers;
  std::vector<int> clients;
  std::map<std::string, std::vector<char>> map;
  std::mutex mutex;
  std::condition_variable cv;
  bool stopping = false;
};

} // namespace rt
} // namespace shoal

TcpStore::TcpStore(const std::string &host, int port, bool serve,
                   std::chrono::milliseconds connectTimeout,
                   std::chrono::milliseconds waitTimeout,
                   const std::string &jobId, int rank)
    : host(host), port(port), waitTimeout(waitTimeout) {
  if (serve)
    server = std::make_unique<TcpStoreServer>(host, port, where(), jobId);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  auto deadline = Clock::now() + connectTimeout;
  std::string last;
  while (true) {
    addrinfo *found = nullptr;
    int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                           &found);
    if (rc != 0) {
      last = fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc));
    } else {
      for (addrinfo *a = found; a && fd < 0; a = a->ai_next) {
        int s = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (s < 0)
          continue;
        if (::connect(s, a->ai_addr, a->ai_addrlen) == 0) {
          fd = s;
        } else {
          last = std::strerror(errno);
          ::close(s);
        }
      }
      ::freeaddrinfo(found);
    }
    if (fd >= 0)
      break;
    if (Clock::now() >= deadline)
      throw Error(fmt::format(
          "cannot reach the rendezvous store at {} within {} s: {} (rank 0 "
          "serves it; check that rank 0 is running and that every rank has "
          "the same MASTER_ADDR and MASTER_PORT; SHOAL_RENDEZVOUS_TIMEOUT "
          "sets the timeout)",
          where(), connectTimeout.count() / 1000.0, last));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  hello(jobId, rank);
}

void TcpStore::hello(const std::string &jobId, int rank) {
  std::lock_guard<std::mutex> lock(mutex);
  char cmd = 'H';
  bool ok = writeAll(fd, &cmd, 1) &&
            writeInt<uint32_t>(fd, static_cast<uint32_t>(jobId.size())) &&
            writeAll(fd, jobId.data(), jobId.size()) &&
            writeInt<uint64_t>(fd, rank < 0 ? uint64_t(-1) : uint64_t(rank));
  char status = 0;
  ok = ok && readAll(fd, &status, 1);
  if (ok && status == 'K')
    return;
  uint64_t len = 0;
  std::string why;
  if (ok && status == 'X' && readInt(fd, len) && len <= kMaxKey) {
    why.resize(len);
    if (!readAll(fd, why.data(), len))
      why.clear();
  }
  throw Error(fmt::format("{} {}",
                          why.empty() ? "the rendezvous store refused this "
                                        "rank (is another program listening "
                                        "on MASTER_PORT?)"
                                      : "rendezvous: " + why,
                          fmt::format("(store at {})", where())));
}

TcpStore::~TcpStore() {
  if (fd >= 0)
    ::close(fd);
  server.reset();
}

std::string TcpStore::where() const {
  return fmt::format("MASTER_ADDR:MASTER_PORT {}:{}", host, port);
}

char TcpStore::request(char cmd, const std::string &key,
                       const std::vector<char> *value, uint64_t timeoutMs,
                       std::vector<char> *reply) {
  std::lock_guard<std::mutex> lock(mutex);
  bool ok = writeAll(fd, &cmd, 1) &&
            writeInt<uint32_t>(fd, static_cast<uint32_t>(key.size())) &&
            writeAll(fd, key.data(), key.size());
  if (ok && value)
    ok = writeInt<uint64_t>(fd, value->size()) &&
         writeAll(fd, value->data(), value->size());
  else if (ok)
    ok = writeInt<uint64_t>(fd, timeoutMs);
  char status = 0;
  ok = ok && readAll(fd, &status, 1);
  if (ok && status == 'V') {
    uint64_t len = 0;
    ok = readInt(fd, len) && len <= kMaxValue;
    if (ok) {
      reply->resize(len);
      ok = readAll(fd, reply->data(), len);
    }
  }
  if (!ok)
    throw Error(fmt::format("lost the connection to the rendezvous store at "
                            "{} (did rank 0 exit?)",
                            where()));
  return status;
}

void TcpStore::set(const std::string &key, const std::vector<char> &data) {
  request('S', key, &data, 0, nullptr);
}

std::vector<char> TcpStore::get(const std::string &key) {
  std::vector<char> value;
  if (request('G', key, nullptr, waitTimeout.count(), &value) != 'V')
    throw Error(fmt::format("rendezvous: key '{}' did not appear in the "
                            "store at {} within {} s (did every rank of "
                            "WORLD_SIZE start?)",
                            key, where(), waitTimeout.count() / 1000.0));
  return value;
}

void TcpStore::wait(const std::vector<std::string> &keys,
                    const std::chrono::milliseconds &timeout) {
  auto deadline = Clock::now() + timeout;
  for (const std::string &key : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (request('W', key, nullptr, std::max<int64_t>(0, left.count()),
                nullptr) != 'K')
      throw Error(fmt::format("rendezvous: key '{}' did not appear in the "
                              "store at {} within {} s (did every rank of "
                              "WORLD_SIZE start?)",
                              key, where(), timeout.count() / 1000.0));
  }
}
