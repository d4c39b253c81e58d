// libFuzzer target for the cost graph reader; what it reads round-trips through the writer.
#include "flexpipe/interop/cost_graph_json.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flexpipe::fuzz::check_round_trip("cost graph", data, size, flexpipe::parse_cost_graph, flexpipe::cost_graph_to_json);
  return 0;
}
