// The link a ping-pong measurement behaves as: exact on timings made from a known link, and the
// fallbacks for noise, single sizes and lines that would go below zero.
#include <gtest/gtest.h>

#include "flexpipe/support/error.h"
#include "flexpipe/train/transport_fit.h"

namespace flexpipe {
namespace {

// Timings a link would give exactly: the sender's part, then the data's flight.
TransportSample sample_of(const Link& link, double bytes) {
  const double send = link.send_cpu_time(bytes);
  return {bytes, send, link.receive_cpu_time(bytes), send + link.transfer_time(bytes),
          link.rendezvous + link.transfer_time(bytes) - link.latency};
}

TEST(TransportFit, RecoversTheLinkThatMadeTheTimings) {
  // 0.05 ms latency, 2000 bytes/ms on the wire, 0.02 ms to send and 0.01 ms to receive a message,
  // 8000 bytes/ms to copy it at either end; a message sent before its receive arrives 0.15 ms after
  // the receive is posted, plus its bytes on the wire.
  const Link link{0.05, 2000, 0.02, 0.01, 8000, 0.15};
  std::vector<TransportSample> samples;
  for (double bytes : {4.0, 64.0, 1024.0, 16384.0, 65536.0}) samples.push_back(sample_of(link, bytes));
  const Link fitted = fit_link(samples);
  EXPECT_NEAR(fitted.latency, 0.05, 1e-12);
  EXPECT_NEAR(fitted.bandwidth, 2000, 1e-6);
  EXPECT_NEAR(fitted.send_cpu, 0.02, 1e-12);
  EXPECT_NEAR(fitted.receive_cpu, 0.01, 1e-12);
  EXPECT_NEAR(fitted.cpu_bandwidth, 8000, 1e-6);
  EXPECT_NEAR(fitted.rendezvous, 0.15, 1e-12);
}

TEST(TransportFit, ByHandOnTwoSizes) {
  // send 0.1 and 0.3 ms at 0 and 1000 bytes: 0.1 ms plus 1000 bytes per 0.2 ms (5000 bytes/ms);
  // one way 0.5 and 1.0 ms, so the flight is 0.4 and 0.7 ms: 0.4 ms plus 1000 bytes per 0.3 ms;
  // receive 0.05 and 0.25 ms: the line starts at 0.05 ms; a late receive 0.2 and 0.5 ms: the
  // rendezvous is 0.2 ms.
  const Link fitted = fit_link({{0, 0.1, 0.05, 0.5, 0.2}, {1000, 0.3, 0.25, 1.0, 0.5}});
  EXPECT_NEAR(fitted.send_cpu, 0.1, 1e-12);
  EXPECT_NEAR(fitted.cpu_bandwidth, 5000, 1e-9);
  EXPECT_NEAR(fitted.latency, 0.4, 1e-12);
  EXPECT_NEAR(fitted.bandwidth, 1000 / 0.3, 1e-9);
  EXPECT_NEAR(fitted.receive_cpu, 0.05, 1e-12);
  EXPECT_NEAR(fitted.rendezvous, 0.2, 1e-12);
}

TEST(TransportFit, ATimeThatFallsWithSizeIsFlatWithAnUnlimitedBandwidth) {
  // The flight takes 0.3 and 0.2 ms (noise): their mean, at any size.
  const Link fitted = fit_link({{10, 0.1, 0, 0.4}, {1000, 0.1, 0, 0.3}});
  EXPECT_NEAR(fitted.latency, 0.25, 1e-12);
  EXPECT_EQ(fitted.bandwidth, kInfinity);
  EXPECT_NEAR(fitted.send_cpu, 0.1, 1e-12);
  EXPECT_EQ(fitted.cpu_bandwidth, kInfinity);
  const Link single = fit_link({{4096, 0.02, 0.01, 0.07}});
  EXPECT_NEAR(single.latency, 0.05, 1e-12);
  EXPECT_EQ(single.bandwidth, kInfinity);
  EXPECT_NEAR(single.receive_cpu, 0.01, 1e-12);
}

TEST(TransportFit, ALineThatWouldStartBelowZeroGoesThroughTheOrigin) {
  // Flights of 0.1, 1.0 and 3.0 ms at 100, 1000 and 2000 bytes: the least-squares line starts at
  // -0.22 ms, so the fit is the line through 0 instead: slope sum(xy) / sum(xx) = 7010 / 5010000.
  const Link fitted = fit_link({{100, 0, 0, 0.1}, {1000, 0, 0, 1.0}, {2000, 0, 0, 3.0}});
  EXPECT_EQ(fitted.latency, 0);
  EXPECT_NEAR(fitted.bandwidth, 5010000.0 / 7010, 1e-9);
}

TEST(TransportFit, NothingMeasuredIsAnError) { EXPECT_THROW(fit_link({}), Error); }

}  // namespace
}  // namespace flexpipe
