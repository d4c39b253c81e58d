// libFuzzer target for the cost graph reader; what it reads round-trips through the writer.
#include "flexpipe/interop/cost_graph_json.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flexpipe;
  CostGraph graph;
  if (!fuzz::reads([&] { graph = parse_cost_graph(fuzz::input_text(data, size), "fuzz.json"); })) return 0;
  const std::string written = cost_graph_to_json(graph);
  if (parse_cost_graph(written, "written.json") != graph) fuzz::round_trip_failed("cost graph", written);
  return 0;
}
