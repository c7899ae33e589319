//===- TcpStore.h - A key-value store over TCP for rendezvous ---*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// What torchrun's TCPStore is: rank 0 serves a key-value map at
// MASTER_ADDR:MASTER_PORT, and every rank (rank 0 included) talks to it as
// a client. Gloo's rendezvous publishes each rank's address there. A get
// waits for its key on the server, up to a timeout.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_COMM_TCPSTORE_H
#define SHOAL_RUNTIME_COMM_TCPSTORE_H

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace shoal {
namespace rt {

class TcpStoreServer;

class TcpStore : public gloo::rendezvous::Store {
public:
  /// Connects to the store at host:port, retrying until `connectTimeout`;
  /// if `serve`, first starts serving it on `port` in this process.
  /// `what` names the address in errors (e.g. "MASTER_ADDR:MASTER_PORT").
  /// Throws Error when the store cannot be served or reached in time.
  /// Every connection starts with a hello naming the job (`jobId`: the
  /// launcher's run id, or "" when none is known) and the rank: the server
  /// refuses another job's ranks, and a second registration of one rank
  /// (two jobs on one MASTER_PORT), with an Error naming both. Rank 0
  /// serves the store on the address MASTER_ADDR names, not on every
  /// interface (but on every one for a host name that resolves to a
  /// loopback address here; SHOAL_STORE_BIND chooses the address).
  TcpStore(const std::string &host, int port, bool serve,
           std::chrono::milliseconds connectTimeout,
           std::chrono::milliseconds waitTimeout, const std::string &jobId = "",
           int rank = -1);
  ~TcpStore() override;

  void set(const std::string &key, const std::vector<char> &data) override;
  std::vector<char> get(const std::string &key) override;
  void wait(const std::vector<std::string> &keys) override {
    wait(keys, waitTimeout);
  }
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override;

private:
  /// Sends one request and reads the reply's status byte.
  char request(char cmd, const std::string &key, const std::vector<char> *value,
               uint64_t timeoutMs, std::vector<char> *reply);
  std::string where() const;
  /// The hello of this connection; throws Error when refused.
  void hello(const std::string &jobId, int rank);

  std::string host;
  int port;
  std::chrono::milliseconds waitTimeout;
  std::unique_ptr<TcpStoreServer> server;
  int fd = -1;
  std::mutex mutex;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_COMM_TCPSTORE_H
