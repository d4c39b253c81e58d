// The key-value store the ranks meet through, served by rank 0 on exactly MASTER_ADDR:MASTER_PORT.
//
// c10d 1.13's TCPStore server listened on every interface of the machine whatever host it was given
// (why this store exists; kept on 2.x, whose TCPStore the tests do not rely on); this one binds the address it is given
// (loopback by default), so a single-machine job is reachable from nowhere else. It implements c10d::Store, so
// ProcessGroupGloo rendezvous through it unchanged. Waiting for keys is done by the client, polling: the server never
// blocks, and a rank that gives up leaves nothing behind on it.
#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace flexpipe::runtime {

class RendezvousServer;

class RendezvousStore final : public c10d::Store {
 public:
  // Rank 0: serves the store on host:port (failing with Error when it cannot bind there) and is its
  // own first client. The server lives as long as this object.
  static c10::intrusive_ptr<RendezvousStore> host(const std::string& host, int port, std::chrono::milliseconds timeout);
  // Every other rank: connects, retrying while the server is not listening yet, for up to `timeout`.
  static c10::intrusive_ptr<RendezvousStore> connect(const std::string& host, int port,
                                                     std::chrono::milliseconds timeout);
  // Use host() or connect(); public for c10::make_intrusive.
  RendezvousStore(int socket, std::unique_ptr<RendezvousServer> server, std::string host, int port,
                  std::chrono::milliseconds timeout);
  ~RendezvousStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;  // waits for the key up to the timeout
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  // Another client of the same server, for a thread of its own.
  c10::intrusive_ptr<c10d::Store> clone() override;

  // The address the server is bound to (rank 0 only; empty elsewhere), e.g. "127.0.0.1:29500".
  std::string bound_address() const;

  // Tells the server which rank this connection is. When an identified connection closes while the
  // server runs (its process died: the kernel closes its sockets), the server sets the key
  // gone_key(rank), unprefixed, so that the survivors can name the rank they lost.
  void identify(int rank);
  static std::string gone_key(int rank);

 private:
  struct Reply;
  Reply request(uint8_t op, const std::string& key, const std::vector<uint8_t>& value = {},
                const std::vector<uint8_t>& extra = {});

  std::mutex mutex_;  // one request at a time on the socket: Gloo's threads share the store
  int socket_;
  std::unique_ptr<RendezvousServer> server_;
  std::string host_;
  int port_;
  std::string address_;  // host:port, for messages
};

}  // namespace flexpipe::runtime
