// The link a measured transport behaves as (docs/fidelity.md, "Measuring the transport"): from
// ping-pong timings at several message sizes, the simulator's Link, whose sender pays
// `send_cpu + bytes / cpu_bandwidth` at SEND, the receiver `receive_cpu + bytes / cpu_bandwidth` at
// RECV, and the data arrives `latency + bytes / bandwidth` after the sender's part.
#pragma once
#include <vector>

#include "flexpipe/costs/cost_table.h"

namespace flexpipe {

// One message size's medians, in one time unit.
struct TransportSample {
  double bytes = 0;
  double send = 0;     // the sender's host time: packing the message and posting the send
  double receive = 0;  // the receiver's host time: allocating the buffer and posting the receive
  double one_way = 0;  // half a round trip: from the start of a send to the end of the peer's wait
  // From posting a receive for a message the peer sent a while before to having it (Gloo writes such
  // a message only once it learns of the receive: the rendezvous); 0 where not measured.
  double late_receive = 0;
};

// Least-squares lines through (bytes, send): send_cpu and cpu_bandwidth; through (bytes, one_way -
// send): latency and bandwidth; and through (bytes, receive), of which only the start counts
// (receive_cpu): the link has one copy rate for both ends, and a receive is posted before its data
// arrives, so only the sender's copy shows in the timings. A line that falls with size (noise, or a
// single size) is flat: its mean, with an unlimited bandwidth; one that would start below zero is
// drawn through the origin instead. The line through (bytes, late_receive) starts at the rendezvous
// (its slope is the wire's again). Throws Error when `samples` is empty.
Link fit_link(const std::vector<TransportSample>& samples);

}  // namespace flexpipe
