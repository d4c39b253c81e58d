// Every JSON file format checks its "format" and "version" with one helper, and parses with one: a file
// given to the wrong reader, written by a newer build, or holding a key twice reads the same whichever
// reader meets it.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/interop/cost_table_json.h"
#include "flexpipe/interop/export_manifest.h"
#include "flexpipe/interop/partition_plan_json.h"
#include "flexpipe/interop/schedule_json.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

struct Reader {
  std::string kind;
  std::string format;
  std::function<void(const std::string&)> parse;
  std::string syntax_label;  // what the reader calls a JSON syntax error
};

std::vector<Reader> readers() {
  return {{"schedule", "flexpipe-schedule", [](const std::string& t) { parse_schedule_json(t, "f.json"); },
           "JSON syntax error"},
          {"cost table", "flexpipe-costs", [](const std::string& t) { parse_cost_table(t, "f.json"); }, "invalid JSON"},
          {"cost graph", "flexpipe-cost-graph", [](const std::string& t) { parse_cost_graph(t, "f.json"); },
           "invalid JSON"},
          {"partition plan", "flexpipe-partition-plan", [](const std::string& t) { parse_partition_plan(t, "f.json"); },
           "partition plan"}};
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

TEST(DuplicateKeys, EveryReaderRefusesTheSecondWhereItStandsWithItsPath) {
  // nlohmann keeps the last of a repeated key: an edit above the original was read and then lost.
  std::vector<Reader> all = readers();
  all.push_back({"export manifest", "flexpipe-export", [](const std::string& t) { parse_export_manifest(t, "f.json"); },
                 "invalid JSON"});
  for (const Reader& reader : all) {
    SCOPED_TRACE(reader.kind);
    const std::string format = "\"format\": \"" + reader.format + "\"";
    const std::string suffix = " (JSON keeps only the last; give each key once)";
    EXPECT_EQ(error_of(reader, "{" + format + ",\n  \"version\": 1,\n  \"version\": 1}"),
              "f.json:3:3: " + reader.syntax_label + ": duplicate key version" + suffix);
    // Nested, and spelled another way: \u0061 is "a".
    EXPECT_EQ(error_of(reader, "{" + format + ", \"version\": 1, \"x\": [0, {\"a\\\"\": 1,\n \"\\u0061\\\"\": 2}]}"),
              "f.json:2:2: " + reader.syntax_label + ": duplicate key x[1].a\"" + suffix);
  }
}

TEST(DuplicateKeys, TheCostGraphsStreamingReadRefusesThemToo) {
  // A graph is read element by element first, and only a failure there reads it as a document: a
  // repeated key in an element, or a second "nodes", must fail there too, not be read the last way.
  const std::string graph = cost_graph_to_json(build_model_graph(find_model("gpt3-1.3b"), find_hardware("A100-80GB")));
  const size_t time = graph.find("\"time\": ");
  ASSERT_NE(time, std::string::npos);
  std::string repeated = graph;
  repeated.insert(time, "\"time\": 5, ");
  const std::string error = error_of(readers()[2], repeated);
  EXPECT_NE(error.find(": invalid JSON: duplicate key nodes[0].forward.time (JSON keeps only the last"),
            std::string::npos)
      << error;
  std::string lists = graph;
  lists.insert(lists.rfind('}'), ", \"nodes\": []");
  EXPECT_NE(error_of(readers()[2], lists).find(": invalid JSON: duplicate key nodes (JSON keeps only the last"),
            std::string::npos);
}

}  // namespace
}  // namespace flexpipe
