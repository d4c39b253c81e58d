// Measures the transport the runtime trains over, between two ranks of this machine: each a thread
// with its own Gloo group over loopback, sending messages of each size back and forth as the
// executor does (a receive posted ahead, the payload packed into a fresh buffer, then the send), and
// messages whose receive is posted only after they were sent (the rendezvous). The medians per size
// are what transport_fit.h turns into the simulator's link.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "flexpipe/train/transport_fit.h"

namespace flexpipe::runtime {

struct TransportProfileOptions {
  int port = 0;               // the rendezvous store's, on 127.0.0.1
  std::vector<double> sizes;  // message sizes in bytes, each rounded up to whole elements
  at::ScalarType dtype = at::kFloat;
  int warmup = 10;                           // untimed round trips per size
  int repeats = 100;                         // timed round trips per size; medians count
  std::chrono::milliseconds timeout{20000};  // loopback connects in well under a second
  // How long the receiver of a late message waits before posting its receive: the sender's notice
  // takes tens of microseconds over loopback.
  std::chrono::microseconds announce{1000};
};

// In milliseconds. Throws TransportError naming the rank and what it waited for.
std::vector<TransportSample> profile_transport(const TransportProfileOptions& options);

// 4 bytes, then eight times more each step, and `largest` last: from a single element to the
// model's largest boundary tensor.
std::vector<double> transport_profile_sizes(double largest);

}  // namespace flexpipe::runtime
