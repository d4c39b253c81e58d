// Which network interface a rank's Gloo connections use, chosen the way PyTorch users choose it:
// GLOO_SOCKET_IFNAME when set, else the interface the kernel routes MASTER_ADDR through. The latter
// binds a loopback master's job to loopback alone, so that a single-machine run listens on no address
// another machine can reach. Plain POSIX, no torch.
#pragma once
#include <string>

namespace flexpipe::runtime {

struct InterfaceChoice {
  std::string name;     // "eth0", "lo"; empty when the route's address belongs to no interface listed
  std::string address;  // the numeric address Gloo binds, e.g. "10.0.0.5"
  std::string reason;   // "GLOO_SOCKET_IFNAME" or "the route to MASTER_ADDR 10.0.0.1"
};

// Throws Error naming the variable (GLOO_SOCKET_IFNAME without an address) or the master address
// (unresolvable, unreachable) when there is no interface to choose.
InterfaceChoice choose_interface(const std::string& master_addr, int master_port);

}  // namespace flexpipe::runtime
