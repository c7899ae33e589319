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
#include <cstring>
#include <map>
#include <thread>

using namespace shoal::rt;
using Clock = std::chrono::steady_clock;

namespace {

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

} // namespace

namespace shoal {
namespace rt {

/// The map and the threads that serve it: one accepting, one per client.
class TcpStoreServer {
public:
  TcpStoreServer(int port, const std::string &where) {
    listenFd = ::socket(AF_INET6, SOCK_STREAM, 0);
    bool v6 = listenFd >= 0;
    if (!v6)
      listenFd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listenFd < 0)
      throw Error(fmt::format("cannot serve the rendezvous store at {}: "
                              "socket: {}",
                              where, std::strerror(errno)));
    int one = 1, zero = 0;
    ::setsockopt(listenFd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) {
      // Both IPv6 and IPv4 clients.
      ::setsockopt(listenFd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 addr{};
      addr.sin6_family = AF_INET6;
      addr.sin6_addr = in6addr_any;
      addr.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(listenFd, reinterpret_cast<sockaddr *>(&addr), sizeof addr);
    } else {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_ANY);
      addr.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(listenFd, reinterpret_cast<sockaddr *>(&addr), sizeof addr);
    }
    if (rc != 0 || ::listen(listenFd, 128) != 0) {
      std::string why = std::strerror(errno);
      ::close(listenFd);
      throw Error(fmt::format("rank 0 cannot serve the rendezvous store on "
                              "port {} ({}): {} (is MASTER_PORT free?)",
                              port, where, why));
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
    while (handle(fd)) {
    }
    // Forget the descriptor before closing it, so that shutting down never
    // reaches a socket that reuses its number.
    std::lock_guard<std::mutex> lock(mutex);
    clients.erase(std::find(clients.begin(), clients.end(), fd));
    ::close(fd);
  }

  /// Answers one request; false when the client is gone.
  bool handle(int fd) {
    char cmd;
    uint32_t keyLen;
    if (!readAll(fd, &cmd, 1) || !readInt(fd, keyLen) || keyLen > (1u << 20))
      return false;
    std::string key(keyLen, '\0');
    if (!readAll(fd, key.data(), keyLen))
      return false;
    if (cmd == 'S') {
      uint64_t len;
      if (!readInt(fd, len) || len > (uint64_t(1) << 32))
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
                   std::chrono::milliseconds waitTimeout)
    : host(host), port(port), waitTimeout(waitTimeout) {
  if (serve)
    server = std::make_unique<TcpStoreServer>(port, where());
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
    ok = readInt(fd, len);
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
