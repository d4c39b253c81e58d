// libFuzzer target for PyTorch's schedule CSV reader, in each lettering.
#include "flexpipe/interop/pytorch_csv.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flexpipe;
  const std::string text = fuzz::input_text(data, size);
  for (CsvLettering lettering : {CsvLettering::Detect, CsvLettering::Current, CsvLettering::Legacy}) {
    CsvReadOptions options;
    options.lettering = lettering;
    fuzz::reads([&] { parse_pytorch_csv(text, "fuzz.csv", options); });
  }
  return 0;
}
