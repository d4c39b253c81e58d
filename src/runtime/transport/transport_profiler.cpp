// Measuring Gloo between two threads of this machine, message size by size, for the simulator's link.
#include "transport/transport_profiler.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <thread>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "flexpipe/support/statistics.h"
#include "transport/transport.h"

namespace flexpipe::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point begin, Clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - begin).count();
}

struct RankTimings {
  std::vector<std::vector<double>> send, receive, round_trip;  // per size, per timed round trip
  std::vector<std::vector<double>> late_receive;               // per size, per timed late message
};

// Rank 0 sends a message (tag 2) as soon as the previous one is through; rank 1 posts its receive a
// while later, when the message has surely been announced, and times the receive until it has the
// data: the rendezvous Gloo takes for a message sent before its receive.
void late_receives(Transport& transport, const TransportProfileOptions& options, const at::Tensor& payload,
                   std::vector<double>& late) {
  const int peer = 1 - transport.rank();
  for (int i = 0; i < options.warmup + options.repeats; ++i) {
    if (transport.rank() == 0) {
      transport.post_send(payload.clone(), peer, 2)->wait(options.timeout);
      continue;
    }
    std::this_thread::sleep_for(options.announce);
    const Clock::time_point posting = Clock::now();
    at::Tensor incoming = at::empty_like(payload);
    transport.post_recv(incoming, peer, 2)->wait(options.timeout);
    if (i >= options.warmup) late.push_back(ms_between(posting, Clock::now()));
  }
}

// Rank 0 sends the ping (tag 0) and times the round trip; rank 1 answers with the pong (tag 1).
// Each side posts its receive before it sends, as the executor's RECV precedes the consumer.
void ping_pong(Transport& transport, const TransportProfileOptions& options, RankTimings& out) {
  const int peer = 1 - transport.rank();
  const bool pinger = transport.rank() == 0;
  const int64_t element = static_cast<int64_t>(at::elementSize(options.dtype));
  for (double bytes : options.sizes) {
    const int64_t elements = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(bytes / element)));
    const at::Tensor payload = at::rand({elements}, at::TensorOptions().dtype(options.dtype));
    std::vector<double>&send = out.send.emplace_back(), &receive = out.receive.emplace_back(),
    &round_trip = out.round_trip.emplace_back();
    for (int i = 0; i < options.warmup + options.repeats; ++i) {
      const Clock::time_point posting = Clock::now();
      at::Tensor incoming = at::empty({elements}, payload.options());
      const std::unique_ptr<Transfer> in = transport.post_recv(incoming, peer, pinger ? 1 : 0);
      const Clock::time_point posted = Clock::now();
      if (!pinger) in->wait(options.timeout);
      const Clock::time_point sending = Clock::now();
      const at::Tensor outgoing = (pinger ? payload : incoming).clone();
      const std::unique_ptr<Transfer> message = transport.post_send(outgoing, peer, pinger ? 0 : 1);
      const Clock::time_point sent = Clock::now();
      if (pinger) in->wait(options.timeout);
      const Clock::time_point answered = Clock::now();
      message->wait(options.timeout);
      if (i < options.warmup) continue;
      send.push_back(ms_between(sending, sent));
      receive.push_back(ms_between(posting, posted));
      if (pinger) round_trip.push_back(ms_between(sending, answered));
    }
    late_receives(transport, options, payload, out.late_receive.emplace_back());
  }
}

}  // namespace

std::vector<double> transport_profile_sizes(double largest) {
  std::vector<double> sizes;
  for (double bytes = 4; bytes < largest; bytes *= 8) sizes.push_back(bytes);
  sizes.push_back(std::max(4.0, largest));
  return sizes;
}

std::vector<TransportSample> profile_transport(const TransportProfileOptions& options) {
  RankTimings timings[2];
  std::exception_ptr failure[2];
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.emplace_back([&, rank] {
      try {
        RankEnv env;
        env.rank = env.local_rank = rank;
        env.world_size = env.local_world_size = 2;
        env.master_addr = "127.0.0.1";
        env.master_port = options.port;
        const std::unique_ptr<Transport> transport = connect_gloo(env, options.timeout);
        ping_pong(*transport, options, timings[rank]);
        transport->barrier(options.timeout);  // neither side leaves while the other still talks
      } catch (...) {
        failure[rank] = std::current_exception();
      }
    });
  for (std::thread& t : ranks) t.join();
  for (const std::exception_ptr& f : failure)
    if (f) std::rethrow_exception(f);
  std::vector<TransportSample> samples;
  for (size_t k = 0; k < options.sizes.size(); ++k) {
    auto both = [&](std::vector<std::vector<double>> RankTimings::*field) {
      std::vector<double> values = (timings[0].*field)[k];
      values.insert(values.end(), (timings[1].*field)[k].begin(), (timings[1].*field)[k].end());
      return values;
    };
    const int64_t element = static_cast<int64_t>(at::elementSize(options.dtype));
    const double bytes = static_cast<double>(
        element * std::max<int64_t>(1, static_cast<int64_t>(std::ceil(options.sizes[k] / element))));
    samples.push_back({bytes, median(both(&RankTimings::send)), median(both(&RankTimings::receive)),
                       median(timings[0].round_trip[k]) / 2, median(timings[1].late_receive[k])});
  }
  return samples;
}

}  // namespace flexpipe::runtime
