// flexpipe launch's choice of MASTER_PORT when none is given: a port the kernel says is free now.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "flexpipe/launch/launcher.h"
#include "flexpipe/support/error.h"

namespace flexpipe {

int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(fmt::format("launch: cannot open a socket to find a free port: {}", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    ::close(fd);
    throw Error(fmt::format("launch: cannot find a free port on 127.0.0.1: {}", std::strerror(error)));
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

}  // namespace flexpipe
