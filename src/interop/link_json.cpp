// Reads and writes a link object (latency, bandwidth, host times at either end) of cost tables and graphs.
#include "link_json.h"

#include <cmath>

#include <fmt/format.h>

namespace flexpipe::interop {

namespace {

// null stands for "no limit".
double bandwidth_or_unlimited(const JsonPathReader& reader, const nlohmann::json& value, const std::string& path,
                              const DeclaredUnits& units, const std::string& zero_advice) {
  if (value.is_null()) return kInfinity;
  if (!value.is_number() && !value.is_string())
    reader.fail(path, fmt::format("expected a number or null, got {}", describe_json(value)));
  const double result = quantity_in_declared_units(reader, value, path, QuantityKind::Bandwidth, units);
  if (result == 0) reader.fail(path, "must be positive (null for unlimited), got 0" + zero_advice);
  return result;
}

}  // namespace

Link read_link_fields(const JsonPathReader& reader, const nlohmann::json& object, const std::string& path,
                      const Link& defaults, const DeclaredUnits& units) {
  Link result = defaults;
  auto time = [&](const char* key, double& field) {
    if (object.contains(key))
      field = quantity_in_declared_units(reader, object[key], json_child(path, key), QuantityKind::Time, units);
  };
  time("latency", result.latency);
  time("send_cpu", result.send_cpu);
  time("receive_cpu", result.receive_cpu);
  time("rendezvous", result.rendezvous);
  if (object.contains("bandwidth"))
    result.bandwidth =
        bandwidth_or_unlimited(reader, object["bandwidth"], json_child(path, "bandwidth"), units,
                               path == "host_link" ? "; for no host link at all, write \"host_link\": null" : "");
  if (object.contains("cpu_bandwidth"))
    result.cpu_bandwidth =
        bandwidth_or_unlimited(reader, object["cpu_bandwidth"], json_child(path, "cpu_bandwidth"), units, "");
  return result;
}

void add_link_fields(nlohmann::ordered_json& out, const Link& link) {
  out["latency"] = number_json(link.latency);
  out["bandwidth"] = number_json(link.bandwidth);
  if (link.send_cpu != 0) out["send_cpu"] = number_json(link.send_cpu);
  if (link.receive_cpu != 0) out["receive_cpu"] = number_json(link.receive_cpu);
  if (std::isfinite(link.cpu_bandwidth)) out["cpu_bandwidth"] = number_json(link.cpu_bandwidth);
  if (link.rendezvous != 0) out["rendezvous"] = number_json(link.rendezvous);
}

nlohmann::ordered_json link_json(const Link& link) {
  nlohmann::ordered_json out;
  add_link_fields(out, link);
  return out;
}

}  // namespace flexpipe::interop
