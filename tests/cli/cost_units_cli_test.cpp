// A cost table written with units ("1.5GiB", "5us", "900GB/s") simulates exactly as the same table
// in plain numbers of its declared units, and a unit it cannot take stops the command with one error.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "cli_harness.h"

namespace {

using flexpipe::test::Outcome;

class CostUnits : public flexpipe::test::CliHarness {
 protected:
  CostUnits() : CliHarness("flexpipe_cost_units_") {}
};

std::string table(const std::string& body) {
  return R"({"format": "flexpipe-costs", "version": 1, "time_unit": "ms", "memory_unit": "bytes", "num_stages": 2, )" +
         body + "}";
}

TEST_F(CostUnits, ATableWithUnitsSimulatesAsItsPlainNumbers) {
  const std::filesystem::path with_units = write("units.json", table(R"(
    "all_stages": {"forward": "2ms", "backward_input": "2ms", "backward_weight": "1ms",
                   "activation_bytes": "1.5GiB", "parameter_bytes": "2GiB", "output_bytes": "64MiB"},
    "link": {"latency": "5us", "bandwidth": "900GB/s"},
    "memory_capacity": "8GiB")"));
  const std::filesystem::path plain = write("plain.json", table(R"(
    "all_stages": {"forward": 2, "backward_input": 2, "backward_weight": 1,
                   "activation_bytes": 1610612736, "parameter_bytes": 2147483648, "output_bytes": 67108864},
    "link": {"latency": 0.005, "bandwidth": 9e8},
    "memory_capacity": 8589934592)"));
  const Outcome written = flexpipe("simulate 1f1b -p 2 -m 4 --costs " + with_units.string());
  const Outcome numbers = flexpipe("simulate 1f1b -p 2 -m 4 --costs " + plain.string());
  ASSERT_EQ(written.exit_code, 0) << written.err;
  ASSERT_EQ(numbers.exit_code, 0) << numbers.err;
  EXPECT_EQ(written.out, numbers.out);
  EXPECT_NE(written.out.find("makespan"), std::string::npos) << written.out;
}

TEST_F(CostUnits, AUnitTheTableCannotTakeIsOneErrorNamingTheField) {
  const std::filesystem::path unitless = write(
      "unitless.json",
      R"({"format": "flexpipe-costs", "version": 1, "num_stages": 2, "all_stages": {"activation_bytes": "1.5GiB"}})");
  const std::filesystem::path misspelt = write("misspelt.json", table(R"("all_stages": {"forward": "2 msec"})"));
  expect_refused({{"simulate 1f1b -p 2 -m 4 --costs " + unitless.string(),
                   "error: " + unitless.string() +
                       ": all_stages.activation_bytes: 1.5GiB cannot be converted: the costs count memory in 'unit'; "
                       "give a bare number in it\n"},
                  {"simulate 1f1b -p 2 -m 4 --costs " + misspelt.string(),
                   "error: " + misspelt.string() +
                       ": all_stages.forward: '2 msec' is not a time; write 5us, 2ms or a bare number in 'ms'\n"}});
}

// A cost graph in abstract time ("unit") has no seconds to convert a rate per second into: the rates
// it does not need (none given, `inf`) are not converted, and its search and partition run; a finite
// rate given for it is one error. Before, every search on such a graph failed.
TEST_F(CostUnits, AGraphInAbstractTimeIsSearchedAndPartitioned) {
  const std::filesystem::path graph = write("unit.json", R"({"format": "flexpipe-cost-graph", "version": 1,
    "name": "abstract", "time_unit": "unit", "hardware": {"flop_rate": 1000, "byte_rate": 100},
    "nodes": [{"name": "a", "parameters": 10, "forward": {"time": 4}, "output_bytes": {"per_token": 4}},
              {"name": "b", "forward": {"time": 3}, "backward_input": {"time": 6}},
              {"name": "c", "parameters": 6, "backward_weight": {"time": 1}}],
    "edges": [{"from": "a", "to": "b", "bytes": {"per_token": 4}}, {"from": "b", "to": "c", "bytes": 8}]})");
  for (const std::string& links : {"", " --link-bandwidth inf", " --link-bandwidth inf --host-bandwidth 0"}) {
    const Outcome searched = flexpipe("search --model " + graph.string() + " -p 2 -m 4" + links);
    EXPECT_EQ(searched.exit_code, 0) << links << "\n" << searched.err;
    EXPECT_NE(searched.out.find("best's peak memory per device"), std::string::npos) << searched.out;
  }
  const Outcome partitioned = flexpipe("partition --model " + graph.string() + " -p 2 --memory-limit 1GB");
  EXPECT_EQ(partitioned.exit_code, 0) << partitioned.err;
  const std::string refusal =
      "error: the graph 'abstract' measures time in 'unit'; rates can be converted for ns, us, ms, s, min and h\n";
  expect_refused(
      {{"partition --model " + graph.string() + " -p 2 --memory-limit 1GB --host-bandwidth 10GB/s", refusal}});
  // search says what it reads first.
  const Outcome refused = flexpipe("search --model " + graph.string() + " -p 2 -m 4 --link-bandwidth 900GB/s");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_TRUE(refused.err.ends_with("read " + graph.string() + ": 3 operators, 2 edges\n" + refusal)) << refused.err;
}

}  // namespace
