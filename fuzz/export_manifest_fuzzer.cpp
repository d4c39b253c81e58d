// libFuzzer target for the export manifest reader: every input is read or refused with one Error (the
// manifest is written by the Python exporter, so there is no C++ writer to round-trip through).
#include "flexpipe/interop/export_manifest.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flexpipe::fuzz::reads([&] { flexpipe::parse_export_manifest(flexpipe::fuzz::input_text(data, size), "fuzz"); });
  return 0;
}
