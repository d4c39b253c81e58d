// libFuzzer target for the stage cost table reader; what it reads round-trips through the writer.
#include "flexpipe/interop/cost_table_json.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flexpipe::fuzz::check_round_trip(
      "cost table", data, size,
      [](const std::string& text, const std::string& origin) { return flexpipe::parse_cost_table(text, origin); },
      flexpipe::cost_table_to_json);
  return 0;
}
