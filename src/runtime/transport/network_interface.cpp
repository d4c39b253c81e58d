// The interface Gloo binds. The route to MASTER_ADDR is found by connecting a UDP socket to it, which
// sends nothing and only asks the kernel which local address it would send from.
#include "transport/network_interface.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

namespace {

std::string numeric_host(const sockaddr* address) {
  const socklen_t length = address->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  char host[NI_MAXHOST];
  if (::getnameinfo(address, length, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return host;
}

// Every interface's addresses, as (name, numeric address) pairs, IPv4 first as Gloo prefers.
std::vector<std::pair<std::string, std::string>> interface_addresses() {
  std::vector<std::pair<std::string, std::string>> v4, v6;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr) continue;
    const int family = entry->ifa_addr->sa_family;
    if (family == AF_INET) v4.emplace_back(entry->ifa_name, numeric_host(entry->ifa_addr));
    if (family == AF_INET6) v6.emplace_back(entry->ifa_name, numeric_host(entry->ifa_addr));
  }
  ::freeifaddrs(list);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

}  // namespace

InterfaceChoice choose_interface(const std::string& master_addr, int master_port) {
  const auto addresses = interface_addresses();
  if (const char* wanted = std::getenv("GLOO_SOCKET_IFNAME"); wanted != nullptr && *wanted != '\0') {
    for (const auto& [name, address] : addresses)
      if (name == wanted) return {name, address, "GLOO_SOCKET_IFNAME"};
    std::vector<std::string> names;
    for (const auto& [name, address] : addresses)
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    throw Error(
        fmt::format("environment variable GLOO_SOCKET_IFNAME={}: this machine has no interface of that name "
                    "with an address (it has: {})",
                    wanted, names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(master_addr.c_str(), std::to_string(master_port).c_str(), &hints, &found);
      error != 0)
    throw Error(fmt::format("MASTER_ADDR {}: cannot resolve it: {}", master_addr, ::gai_strerror(error)));
  std::string local, last_error = "no address";
  for (addrinfo* a = found; a != nullptr && local.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0)
      local = numeric_host(reinterpret_cast<sockaddr*>(&bound));
    else
      last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (local.empty())
    throw Error(
        fmt::format("MASTER_ADDR {}: no route from this machine reaches it ({}); set GLOO_SOCKET_IFNAME to "
                    "the interface to use",
                    master_addr, last_error));
  InterfaceChoice choice{"", local, fmt::format("the route to MASTER_ADDR {}", master_addr)};
  for (const auto& [name, address] : addresses)
    if (address == local) choice.name = name;
  return choice;
}

}  // namespace flexpipe::runtime
