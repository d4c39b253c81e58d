// The link a measured transport behaves as, fitted to ping-pong timings at several sizes.
#include "flexpipe/train/transport_fit.h"

#include <algorithm>
#include <cmath>

#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

struct Line {
  double intercept = 0;
  double slope = 0;  // time per byte; 0 is an unlimited bandwidth
};

// Least squares with both terms at least 0.
Line fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0;
  for (size_t i = 0; i < x.size(); ++i) sx += x[i], sy += y[i];
  const double mx = sx / n, my = sy / n;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  if (sxx == 0 || sxy <= 0) return {std::max(0.0, my), 0};
  const Line line{my - sxy / sxx * mx, sxy / sxx};
  if (line.intercept >= 0) return line;
  double through_origin = 0, xx = 0;
  for (size_t i = 0; i < x.size(); ++i) through_origin += x[i] * y[i], xx += x[i] * x[i];
  return {0, through_origin / xx};
}

double bandwidth(const Line& line) { return line.slope > 0 ? 1 / line.slope : kInfinity; }

}  // namespace

Link fit_link(const std::vector<TransportSample>& samples) {
  if (samples.empty()) throw Error("fitting a link needs at least one measured message size");
  std::vector<double> bytes, send, network;
  for (const TransportSample& s : samples) {
    bytes.push_back(s.bytes);
    send.push_back(s.send);
    network.push_back(std::max(0.0, s.one_way - s.send));
  }
  const Line host = fit_line(bytes, send), wire = fit_line(bytes, network);
  Link link;
  link.latency = wire.intercept;
  link.bandwidth = bandwidth(wire);
  link.send_cpu = host.intercept;
  link.cpu_bandwidth = bandwidth(host);
  std::vector<double> receive;
  for (const TransportSample& s : samples) receive.push_back(s.receive);
  link.receive_cpu = fit_line(bytes, receive).intercept;
  std::vector<double> late;
  for (const TransportSample& s : samples) late.push_back(s.late_receive);
  link.rendezvous = fit_line(bytes, late).intercept;
  return link;
}

}  // namespace flexpipe
