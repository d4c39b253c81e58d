// A link object, as cost tables and measured cost graphs write it: latency and bandwidth, which delay
// the data, and the host time a message takes at either end (docs/cost-table.md, "Links"). Private to
// the core library.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "flexpipe/costs/cost_table.h"
#include "json_quantity.h"
#include "json_reader.h"

namespace flexpipe::interop {

// The keys a link object may hold.
inline constexpr std::string_view kLinkKeys[] = {"latency",     "bandwidth",     "send_cpu",
                                                 "receive_cpu", "cpu_bandwidth", "rendezvous"};

// The link fields of `object` (which may hold other keys; the caller checks them) in the file's units;
// fields left out keep their value in `defaults`. Bandwidths are positive or null (unlimited).
Link read_link_fields(const JsonPathReader& reader, const nlohmann::json& object, const std::string& path,
                      const Link& defaults, const DeclaredUnits& units);

// Latency and bandwidth always; the host-time fields and the rendezvous only where a transport measured them, so that
// files without them stay as they were.
void add_link_fields(nlohmann::ordered_json& out, const Link& link);
nlohmann::ordered_json link_json(const Link& link);

}  // namespace flexpipe::interop
