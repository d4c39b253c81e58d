// libFuzzer target for PipeDream's graph.txt profiles.
#include "flexpipe/interop/pipedream_import.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flexpipe::fuzz::reads([&] { flexpipe::parse_pipedream_graph(flexpipe::fuzz::input_text(data, size), "graph.txt"); });
  return 0;
}
