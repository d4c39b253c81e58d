// The rendezvous store: a server thread per client on rank 0, bound to one address, and a client that
// sends one request at a time. Wire format, both ways: a request is op (1 byte), then key, value and
// extra, each a 4-byte length and its bytes; a reply is a status byte, then a value the same way.
#include "transport/rendezvous_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

enum StoreCommand : uint8_t { kSet = 1, kGet, kAdd, kCheck, kDelete, kCount, kCompareSet, kIdentify };
enum Status : uint8_t { kOk = 0, kMissing = 1, kBadRequest = 2 };

// Keys and values are small (addresses, counters); anything larger is a peer that is not ours.
constexpr uint32_t kLargestField = 64 << 20;

[[noreturn]] void fail(const std::string& what) { throw Error(what); }

std::string errno_text(int error) { return std::strerror(error); }

// Sends all of `data` or throws; MSG_NOSIGNAL: a closed peer is an error here, not SIGPIPE.
void send_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(fmt::format("the connection to the store closed ({})", errno_text(errno)));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// Receives exactly `size` bytes or throws; waits at most until `deadline` (none: Clock::time_point::max).
void receive_all(int fd, void* data, size_t size, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    if (deadline != Clock::time_point::max()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd ready{fd, POLLIN, 0};
      const int polled = left > 0 ? ::poll(&ready, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30))) : 0;
      if (polled < 0 && errno == EINTR) continue;
      if (polled == 0) fail("no answer from the store in time");
    }
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) fail("the store closed the connection (has its host, rank 0, exited?)");
    if (n < 0) fail(fmt::format("reading from the store failed ({})", errno_text(errno)));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void send_field(int fd, const void* data, uint32_t size) {
  send_all(fd, &size, sizeof size);
  if (size > 0) send_all(fd, data, size);
}

Bytes receive_field(int fd, Clock::time_point deadline) {
  uint32_t size = 0;
  receive_all(fd, &size, sizeof size, deadline);
  if (size > kLargestField) fail(fmt::format("a field of {} bytes is larger than any the store holds", size));
  Bytes field(size);
  if (size > 0) receive_all(fd, field.data(), size, deadline);
  return field;
}

std::string text_of(const Bytes& bytes) { return {bytes.begin(), bytes.end()}; }

bool whole_number(const Bytes& bytes, int64_t& value) {
  const std::string text = text_of(bytes);
  char* end = nullptr;
  errno = 0;
  value = std::strtoll(text.c_str(), &end, 10);
  return !text.empty() && end == text.c_str() + text.size() && errno == 0;
}
Bytes bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

// The addresses `host` names, for a TCP socket on `port`.
struct AddressList {
  addrinfo* first = nullptr;
  AddressList(const std::string& host, int port, bool passive) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    const int error = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &first);
    if (error != 0) fail(fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(error)));
  }
  ~AddressList() {
    if (first != nullptr) ::freeaddrinfo(first);
  }
  AddressList(const AddressList&) = delete;
  AddressList& operator=(const AddressList&) = delete;
};

std::string numeric_address(const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getnameinfo(address, length, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return address->sa_family == AF_INET6 ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

}  // namespace

// Rank 0's side: the table and the threads that serve it.
class RendezvousServer {
 public:
  RendezvousServer(const std::string& host, int port) {
    const AddressList addresses(host, port, false);
    std::string last_error = "no address";
    for (addrinfo* a = addresses.first; a != nullptr && listener_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      const int on = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
        listener_ = fd;
        sockaddr_storage bound{};
        socklen_t length = sizeof bound;
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
        address_ = numeric_address(reinterpret_cast<sockaddr*>(&bound), length);
      } else {
        last_error = errno_text(errno);
        ::close(fd);
      }
    }
    if (listener_ < 0) fail(fmt::format("cannot listen on {}:{}: {}", host, port, last_error));
    if (::pipe2(wake_, O_CLOEXEC) != 0) fail(fmt::format("cannot make a pipe: {}", errno_text(errno)));
    acceptor_ = std::thread([this] { accept_clients(); });
  }

  ~RendezvousServer() {
    stopping_ = true;
    const char byte = 0;
    [[maybe_unused]] const ssize_t written = ::write(wake_[1], &byte, 1);
    acceptor_.join();
    {
      std::lock_guard lock(clients_mutex_);
      for (int fd : client_fds_) ::shutdown(fd, SHUT_RDWR);  // ends each client thread's read
    }
    for (std::thread& t : client_threads_) t.join();
    for (int fd : client_fds_) ::close(fd);
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  const std::string& address() const { return address_; }

 private:
  void accept_clients() {
    while (!stopping_) {
      pollfd ready[2] = {{listener_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (::poll(ready, 2, -1) < 0) continue;
      if (ready[1].revents != 0) return;
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      const int on = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      std::lock_guard lock(clients_mutex_);
      client_fds_.push_back(fd);
      client_threads_.emplace_back([this, fd] { serve(fd); });
    }
  }

  // One client's requests, until it closes the connection or sends something that is not a request.
  void serve(int fd) {
    int64_t rank = -1;  // which rank this connection is, once it says so
    try {
      while (!stopping_) {
        uint8_t op = 0;
        receive_all(fd, &op, 1, Clock::time_point::max());
        const std::string key = text_of(receive_field(fd, Clock::time_point::max()));
        const Bytes value = receive_field(fd, Clock::time_point::max());
        const Bytes extra = receive_field(fd, Clock::time_point::max());
        Bytes answer;
        uint8_t status = kOk;
        if (op == kIdentify)
          status = whole_number(value, rank) ? kOk : kBadRequest;
        else
          status = answer_request(op, key, value, extra, answer);
        send_all(fd, &status, 1);
        send_field(fd, answer.data(), static_cast<uint32_t>(answer.size()));
      }
    } catch (const std::exception&) {
      // The client left (or spoke another protocol): its connection ends, the store goes on.
    }
    if (rank >= 0 && !stopping_) {
      std::lock_guard lock(table_mutex_);
      table_[RendezvousStore::gone_key(static_cast<int>(rank))] = bytes_of("1");
    }
  }

  uint8_t answer_request(uint8_t op, const std::string& key, const Bytes& value, const Bytes& extra, Bytes& answer) {
    std::lock_guard lock(table_mutex_);
    switch (op) {
      case kSet: table_[key] = value; return kOk;
      case kGet: {
        const auto it = table_.find(key);
        if (it == table_.end()) return kMissing;
        answer = it->second;
        return kOk;
      }
      case kAdd: {
        // Counters are kept as decimal text, as c10d's stores keep them.
        int64_t total = 0, step = 0;
        const auto it = table_.find(key);
        if (!whole_number(value, step) || (it != table_.end() && !whole_number(it->second, total))) return kBadRequest;
        total += step;
        table_[key] = bytes_of(std::to_string(total));
        answer = table_[key];
        return kOk;
      }
      case kCheck: return table_.count(key) > 0 ? kOk : kMissing;
      case kDelete: return table_.erase(key) > 0 ? kOk : kMissing;
      case kCount: answer = bytes_of(std::to_string(table_.size())); return kOk;
      case kCompareSet: {
        // c10d's semantics: set `extra` when the key holds `value`, or when it is missing and `value`
        // is empty; answer what the key holds afterwards.
        const auto it = table_.find(key);
        if ((it == table_.end() && value.empty()) || (it != table_.end() && it->second == value)) table_[key] = extra;
        const auto now = table_.find(key);
        answer = now == table_.end() ? value : now->second;
        return kOk;
      }
      default: return kBadRequest;
    }
  }

  int listener_ = -1;
  int wake_[2] = {-1, -1};
  std::string address_;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex clients_mutex_;
  std::vector<int> client_fds_;
  std::vector<std::thread> client_threads_;
  std::mutex table_mutex_;
  std::map<std::string, Bytes> table_;
};

namespace {

// A connected client socket, or -1 when nobody listens there yet.
int try_connect(const std::string& host, int port, std::string& error) {
  const AddressList addresses(host, port, false);
  for (addrinfo* a = addresses.first; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      const int on = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      return fd;
    }
    error = errno_text(errno);
    ::close(fd);
  }
  return -1;
}

}  // namespace

struct RendezvousStore::Reply {
  uint8_t status = kOk;
  Bytes value;
};

RendezvousStore::RendezvousStore(int socket, std::unique_ptr<RendezvousServer> server, std::string host, int port,
                                 std::chrono::milliseconds timeout)
    : c10d::Store(timeout),
      socket_(socket),
      server_(std::move(server)),
      host_(std::move(host)),
      port_(port),
      address_(fmt::format("{}:{}", host_, port_)) {}

RendezvousStore::~RendezvousStore() {
  ::close(socket_);
  server_.reset();
}

c10::intrusive_ptr<RendezvousStore> RendezvousStore::host(const std::string& host, int port,
                                                          std::chrono::milliseconds timeout) {
  auto server = std::make_unique<RendezvousServer>(host, port);
  std::string error;
  const int fd = try_connect(host, port, error);
  if (fd < 0) fail(fmt::format("cannot reach its own store at {}:{}: {}", host, port, error));
  return c10::make_intrusive<RendezvousStore>(fd, std::move(server), host, port, timeout);
}

c10::intrusive_ptr<RendezvousStore> RendezvousStore::connect(const std::string& host, int port,
                                                             std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string error = "no attempt";
  while (true) {
    const int fd = try_connect(host, port, error);
    if (fd >= 0) return c10::make_intrusive<RendezvousStore>(fd, nullptr, host, port, timeout);
    // Rank 0 may not listen yet (it loads libtorch too, 0.7 s of CPU): a refused connection costs
    // microseconds, so retrying often starts the job as soon as it listens.
    if (Clock::now() + std::chrono::milliseconds(20) > deadline) fail(error);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

c10::intrusive_ptr<c10d::Store> RendezvousStore::clone() { return connect(host_, port_, timeout_); }

std::string RendezvousStore::bound_address() const { return server_ ? server_->address() : std::string(); }

void RendezvousStore::identify(int rank) { request(kIdentify, "", bytes_of(std::to_string(rank))); }

std::string RendezvousStore::gone_key(int rank) { return fmt::format("gone/{}", rank); }

RendezvousStore::Reply RendezvousStore::request(uint8_t op, const std::string& key, const Bytes& value,
                                                const Bytes& extra) {
  std::lock_guard lock(mutex_);
  send_all(socket_, &op, 1);
  send_field(socket_, key.data(), static_cast<uint32_t>(key.size()));
  send_field(socket_, value.data(), static_cast<uint32_t>(value.size()));
  send_field(socket_, extra.data(), static_cast<uint32_t>(extra.size()));
  Reply reply;
  const auto deadline = Clock::now() + std::max(timeout_, std::chrono::milliseconds(1000));
  receive_all(socket_, &reply.status, 1, deadline);
  reply.value = receive_field(socket_, deadline);
  if (reply.status == kBadRequest) fail(fmt::format("the store at {} did not understand a request", address_));
  return reply;
}

void RendezvousStore::set(const std::string& key, const Bytes& value) { request(kSet, key, value); }

Bytes RendezvousStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return request(kCompareSet, key, expected, desired).value;
}

Bytes RendezvousStore::get(const std::string& key) {
  wait({key});
  return request(kGet, key).value;
}

int64_t RendezvousStore::add(const std::string& key, int64_t value) {
  return std::stoll(text_of(request(kAdd, key, bytes_of(std::to_string(value))).value));
}

bool RendezvousStore::deleteKey(const std::string& key) { return request(kDelete, key).status == kOk; }

bool RendezvousStore::check(const std::vector<std::string>& keys) {
  for (const std::string& key : keys)
    if (request(kCheck, key).status != kOk) return false;
  return true;
}

int64_t RendezvousStore::getNumKeys() { return std::stoll(text_of(request(kCount, "").value)); }

void RendezvousStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void RendezvousStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (!check(keys)) {
    if (Clock::now() >= deadline) {
      std::string names;
      for (const std::string& key : keys) names += (names.empty() ? "" : ", ") + key;
      fail(fmt::format("waited {} ms at the store {} for {}", timeout.count(), address_, names));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace flexpipe::runtime
