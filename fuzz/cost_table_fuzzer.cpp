// libFuzzer target for the stage cost table reader; what it reads round-trips through the writer.
#include "flexpipe/interop/cost_table_json.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flexpipe;
  CostTable table;
  if (!fuzz::reads([&] { table = parse_cost_table(fuzz::input_text(data, size), "fuzz.json"); })) return 0;
  const std::string written = cost_table_to_json(table);
  if (parse_cost_table(written, "written.json") != table) fuzz::round_trip_failed("cost table", written);
  return 0;
}
