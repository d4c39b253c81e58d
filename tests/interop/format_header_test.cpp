// Every JSON file format checks its "format" and "version" with one helper: a file given to the wrong
// reader, or written by a newer build, reads the same whichever reader meets it.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/interop/cost_table_json.h"
#include "flexpipe/interop/partition_plan_json.h"
#include "flexpipe/interop/schedule_json.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

struct Reader {
  std::string kind;
  std::string format;
  std::function<void(const std::string&)> parse;
};

std::vector<Reader> readers() {
  return {{"schedule", "flexpipe-schedule", [](const std::string& t) { parse_schedule_json(t, "f.json"); }},
          {"cost table", "flexpipe-costs", [](const std::string& t) { parse_cost_table(t, "f.json"); }},
          {"cost graph", "flexpipe-cost-graph", [](const std::string& t) { parse_cost_graph(t, "f.json"); }},
          {"partition plan", "flexpipe-partition-plan",
           [](const std::string& t) { parse_partition_plan(t, "f.json"); }}};
}

std::string error_of(const Reader& reader, const std::string& text) {
  try {
    reader.parse(text);
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(FormatHeader, EveryReaderReportsItTheSameWay) {
  for (const Reader& reader : readers()) {
    SCOPED_TRACE(reader.kind);
    const std::string format = "\"format\": \"" + reader.format + "\"";
    EXPECT_EQ(error_of(reader, R"({"version": 1})"),
              "f.json: format: missing (a " + reader.kind + " starts with " + format + ")");
    EXPECT_EQ(error_of(reader, R"({"format": 7, "version": 1})"), "f.json: format: expected a string, got 7");
    EXPECT_EQ(error_of(reader, R"({"format": "flexpipe-other", "version": 1})"),
              "f.json: format: expected \"" + reader.format + "\", got \"flexpipe-other\"");
    EXPECT_EQ(error_of(reader, "{" + format + "}"), "f.json: version: missing (expected 1)");
    EXPECT_EQ(error_of(reader, "{" + format + R"(, "version": 2})"),
              "f.json: version: unsupported version 2 (this build reads version 1)");
    EXPECT_EQ(error_of(reader, "{" + format + R"(, "version": "1"})"),
              "f.json: version: unsupported version \"1\" (this build reads version 1)");
  }
}

}  // namespace
}  // namespace flexpipe
