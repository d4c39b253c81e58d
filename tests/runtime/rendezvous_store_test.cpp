// The rendezvous store: c10d::Store's semantics, served on the master address and nowhere else.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "flexpipe/support/error.h"
#include "transport/rendezvous_store.h"
#include "transport/transport.h"

namespace flexpipe::runtime {
namespace {

using namespace std::chrono_literals;

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// Whether a TCP connection to ip:port is accepted.
bool accepts(const std::string& ip, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &address.sin_addr);
  const bool connected = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return connected;
}

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

TEST(RendezvousStore, ListensOnTheMasterAddressAndNowhereElse) {
  const int port = free_port();
  const auto store = RendezvousStore::host("127.0.0.1", port, 5s);
  EXPECT_EQ(store->bound_address(), "127.0.0.1:" + std::to_string(port));
  EXPECT_TRUE(accepts("127.0.0.1", port));
  // Every 127.x.y.z address reaches this machine's loopback: a server bound to all interfaces (as
  // c10d 1.13's TCPStore is) would accept here too.
  EXPECT_FALSE(accepts("127.0.0.2", port));
}

TEST(RendezvousStore, KeepsC10dStoreSemanticsAcrossClients) {
  const int port = free_port();
  const auto host = RendezvousStore::host("127.0.0.1", port, 5s);
  const auto client = RendezvousStore::connect("127.0.0.1", port, 5s);
  host->set("a", bytes("1"));
  EXPECT_EQ(client->get("a"), bytes("1"));
  EXPECT_TRUE(client->check({"a"}));
  EXPECT_FALSE(client->check({"a", "b"}));
  EXPECT_EQ(client->add("n", 5), 5);
  EXPECT_EQ(host->add("n", -2), 3);
  EXPECT_EQ(host->getNumKeys(), 2);
  // compareSet: set when the key holds the expected value (or is missing and nothing is expected).
  EXPECT_EQ(client->compareSet("c", {}, bytes("x")), bytes("x"));
  EXPECT_EQ(client->compareSet("c", bytes("y"), bytes("z")), bytes("x"));
  EXPECT_EQ(host->compareSet("c", bytes("x"), bytes("z")), bytes("z"));
  EXPECT_TRUE(client->deleteKey("a"));
  EXPECT_FALSE(client->deleteKey("a"));
  // get() waits for a key another client sets later.
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    host->set("late", bytes("here"));
  });
  EXPECT_EQ(client->get("late"), bytes("here"));
  later.join();
}

TEST(RendezvousStore, AClonedStoreIsAnotherConnectionToTheSameKeys) {
  const int port = free_port();
  const auto host = RendezvousStore::host("127.0.0.1", port, 5s);
  const auto clone = host->clone();
  clone->set("from clone", bytes("1"));
  EXPECT_EQ(host->get("from clone"), bytes("1"));
  host->set("from host", bytes("2"));
  EXPECT_EQ(clone->get("from host"), bytes("2"));
  EXPECT_EQ(clone->getTimeout(), 5s);
  // Its own socket: a wait on the clone does not hold the original's connection.
  std::thread waiting([&] { EXPECT_EQ(clone->get("later"), bytes("3")); });
  std::this_thread::sleep_for(20ms);
  host->set("later", bytes("3"));
  waiting.join();
}

TEST(RendezvousStore, AWaitThatTimesOutNamesTheKeysAndTheStore) {
  const int port = free_port();
  const auto host = RendezvousStore::host("127.0.0.1", port, 5s);
  try {
    host->wait({"never"}, 100ms);
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "waited 100 ms at the store 127.0.0.1:" + std::to_string(port) + " for never");
  }
}

TEST(RendezvousStore, ASecondHostOnTheSamePortIsOneError) {
  const int port = free_port();
  const auto first = RendezvousStore::host("127.0.0.1", port, 5s);
  try {
    RendezvousStore::host("127.0.0.1", port, 5s);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot listen on 127.0.0.1:" + std::to_string(port) + ": Address already in use");
  }
}

// The listening TCP sockets this process holds, as "address:port" in /proc's hex notation.
std::set<std::string> listening_sockets_of_this_process() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(fd.path(), error).string();
    if (!error && target.starts_with("socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<std::string> listening;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode) > 0) listening.insert(local);
    }
  }
  return listening;
}

TEST(GlooRendezvous, ATwoRankJobListensOnLoopbackOnly) {
  const int port = free_port();
  std::vector<std::unique_ptr<Transport>> transports(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.emplace_back([&, rank] {
      RankEnv env;
      env.rank = rank;
      env.world_size = 2;
      env.master_addr = "127.0.0.1";
      env.master_port = port;
      transports[rank] = connect_gloo(env, 20s);
    });
  for (std::thread& t : ranks) t.join();
  const std::set<std::string> listening = listening_sockets_of_this_process();
  ASSERT_FALSE(listening.empty());
  for (const std::string& local : listening) {
    // 127.0.0.1 is 0100007F in /proc's little-endian hex; anything else (00000000: every IPv4
    // address, or an IPv6 address) is a socket reachable from elsewhere.
    EXPECT_TRUE(local.starts_with("0100007F:")) << local;
  }
}

}  // namespace
}  // namespace flexpipe::runtime
