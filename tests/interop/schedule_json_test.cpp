// Tests of the schedule JSON format and its action cells: every kind, custom names, errors.
#include "flexpipe/interop/schedule_json.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "flexpipe/ir/lowering.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

using nlohmann::json;
using K = ActionKind;

std::string error_of(const std::string& text) {
  try {
    parse_schedule_json(text, "s.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// A valid document to break one field at a time.
json minimal() {
  return json::parse(R"({"format": "flexpipe-schedule", "version": 1, "name": "m", "devices": 2,
    "microbatches": 1, "stages_per_pipeline": 2, "pipelines": 1, "placement": [0, 1],
    "actions": [["0F0", "0B0"], ["1F0", "1B0"]]})");
}

std::string error_with(const std::function<void(json&)>& edit) {
  json doc = minimal();
  edit(doc);
  return error_of(doc.dump());
}

// Every kind the IR has, two pipelines, custom kinds of both shapes.
Schedule rich_schedule() {
  Schedule s = make_schedule("rich", 2, 2, bidirectional_placement(2), 2);
  s.microbatch_pipeline = {0, 1};
  CustomOpKind gather;
  gather.name = "ALL2ALL_X";
  gather.after = {{K::F, 0, false}};
  gather.before = {{K::W, -1, true}};
  gather.duration = 0.125;
  gather.memory = -3.5e9;
  gather.communicates = true;
  CustomOpKind flush;
  flush.name = "FLUSH";
  flush.per_microbatch = false;
  s.custom_ops = {gather, flush};
  s.device_actions[0] = {Action::make(K::F, 0, 0),          Action::make(K::SendF, 0, 0),  Action::custom_op(0, 0, 0),
                         Action::make(K::Offload, 0, 0),    Action::make(K::Reload, 0, 0), Action::make(K::R, 0, 0),
                         Action::overlap(3, 1, 0, 0, K::I), Action::make(K::W, 0, 0),      Action::make(K::Opt, 0),
                         Action::custom_op(1, 3, -1)};
  s.device_actions[1] = {Action::make(K::RecvF, 1, 0), Action::make(K::F, 1, 0), Action::make(K::B, 1, 0),
                         Action::make(K::SendB, 1, 0), Action::make(K::F, 2, 1), Action::make(K::RecvB, 2, 1),
                         Action::make(K::B, 2, 1)};
  return s;
}

// ---- parse_action_cell --------------------------------------------------------------------------

TEST(ActionCell, ParsesEveryBuiltinKind) {
  const Schedule none;
  const std::pair<const char*, Action> cases[] = {
      {"2F0", Action::make(K::F, 2, 0)},
      {"12B34", Action::make(K::B, 12, 34)},
      {"1I3", Action::make(K::I, 1, 3)},
      {"1W3", Action::make(K::W, 1, 3)},
      {"0R5", Action::make(K::R, 0, 5)},
      {"3SEND_F1", Action::make(K::SendF, 3, 1)},
      {"4RECV_F1", Action::make(K::RecvF, 4, 1)},
      {"3SEND_B1", Action::make(K::SendB, 3, 1)},
      {"2RECV_B1", Action::make(K::RecvB, 2, 1)},
      {"1OFFLOAD2", Action::make(K::Offload, 1, 2)},
      {"1RELOAD2", Action::make(K::Reload, 1, 2)},
      {"0OPT", Action::make(K::Opt, 0)},
      {"(0F7;7B3)OVERLAP_F_B", Action::overlap(0, 7, 7, 3, K::B)},
      {"(4F4;3I0)OVERLAP_F_B", Action::overlap(4, 4, 3, 0, K::I)},
  };
  for (const auto& [cell, expected] : cases) {
    Action action;
    std::string error;
    ASSERT_TRUE(parse_action_cell(cell, none, action, error)) << cell << ": " << error;
    EXPECT_EQ(action, expected) << cell;
    EXPECT_EQ(none.action_name(action), cell);
  }
}

TEST(ActionCell, CustomNamesResolveAgainstTheSchedule) {
  Schedule s;
  s.custom_ops.resize(3);
  s.custom_ops[0].name = "FX";  // starts like the built-in F
  s.custom_ops[1].name = "ALL2ALL";
  s.custom_ops[2].name = "ALL2ALL_B";  // extends another custom name
  s.custom_ops[2].per_microbatch = false;
  Action a;
  std::string error;
  ASSERT_TRUE(parse_action_cell("3FX12", s, a, error)) << error;
  EXPECT_EQ(a, Action::custom_op(0, 3, 12));
  ASSERT_TRUE(parse_action_cell("0ALL2ALL7", s, a, error)) << error;
  EXPECT_EQ(a, Action::custom_op(1, 0, 7));
  ASSERT_TRUE(parse_action_cell("0ALL2ALL_B", s, a, error)) << error;
  EXPECT_EQ(a, Action::custom_op(2, 0, -1));
  ASSERT_TRUE(parse_action_cell("3F12", s, a, error)) << error;
  EXPECT_EQ(a, Action::make(K::F, 3, 12));
  EXPECT_FALSE(parse_action_cell("0ALL2ALL_B1", s, a, error));
  EXPECT_EQ(error, "cannot parse action '0ALL2ALL_B1': ALL2ALL_B takes no micro-batch");
  EXPECT_FALSE(parse_action_cell("0MYOP1", s, a, error));
  EXPECT_EQ(error, "cannot parse action '0MYOP1': unknown action type 'MYOP'");
}

TEST(ActionCell, Errors) {
  const Schedule none;
  const std::pair<const char*, const char*> cases[] = {
      {"", "cannot parse action '': expected a stage number first"},
      {"F0", "cannot parse action 'F0': expected a stage number first"},
      {"-1F0", "cannot parse action '-1F0': expected a stage number first"},
      {"1", "cannot parse action '1': missing the action type after the stage"},
      {"1f0", "cannot parse action '1f0': unknown action type 'f'"},
      {"1F", "cannot parse action '1F': F needs a micro-batch"},
      {"1OPT0", "cannot parse action '1OPT0': OPT takes no micro-batch"},
      {"1 F0", "cannot parse action '1 F0': unknown action type ' F'"},
      {"3000000000F0", "cannot parse action '3000000000F0': stage 3000000000 is too large"},
      {"1BW0", "cannot parse action '1BW0': unknown action type 'BW'"},
      {"1CUSTOM0_0", "cannot parse action '1CUSTOM0_0': unknown action type 'CUSTOM0_'"},
      {"(0F1;0F2)OVERLAP_F_B",
       "cannot parse action '(0F1;0F2)OVERLAP_F_B': the second half of OVERLAP_F_B must be a backward (B or I), "
       "not '0F2'"},
      {"(0F1;)OVERLAP_F_B", "cannot parse action '(0F1;)OVERLAP_F_B': expected a stage number first"},
      {"(0F1;0B1)", "cannot parse action '(0F1;0B1)': expected '(FORWARD;BACKWARD)OVERLAP_F_B'"},
      {"((0F1;0B1)OVERLAP_F_B;0B1)OVERLAP_F_B",
       "cannot parse action '((0F1;0B1)OVERLAP_F_B;0B1)OVERLAP_F_B': expected '(FORWARD;BACKWARD)OVERLAP_F_B'"},
  };
  for (const auto& [cell, expected] : cases) {
    Action action;
    std::string error;
    EXPECT_FALSE(parse_action_cell(cell, none, action, error)) << cell;
    EXPECT_EQ(error, expected);
  }
}

// ---- round trips --------------------------------------------------------------------------------

TEST(ScheduleJson, RoundTripIsLossless) {
  const Schedule s = rich_schedule();
  EXPECT_EQ(schedule_from_json(schedule_to_json(s), "x"), s);
  EXPECT_EQ(parse_schedule_json(write_schedule_json(s), "x"), s);
  EXPECT_EQ(parse_schedule_json(schedule_to_json(s).dump(2), "x"), s);
}

TEST(ScheduleJson, BuiltinsAndLoweredBuiltinsRoundTrip) {
  ASSERT_FALSE(builtin_schedules().empty());
  for (const BuiltinSchedule& builtin : builtin_schedules()) {
    const Schedule s = make_builtin(builtin.name, {4, 8, 0});
    EXPECT_EQ(parse_schedule_json(write_schedule_json(s), "x"), s) << builtin.name;
    const Schedule lowered = lower(s);
    EXPECT_EQ(parse_schedule_json(write_schedule_json(lowered), "x"), lowered) << builtin.name;
  }
}

TEST(ScheduleJson, FileText) {
  Schedule s = make_schedule("two", 2, 1, loop_placement(2, 2));
  CustomOpKind flush;
  flush.name = "FLUSH";
  flush.after = {{K::W, 0, true}};
  flush.duration = 1.5;
  flush.per_microbatch = false;
  s.custom_ops = {flush};
  s.device_actions[0] = {Action::make(K::F, 0, 0), Action::make(K::B, 0, 0), Action::custom_op(0, 0, -1)};
  s.device_actions[1] = {Action::make(K::F, 1, 0), Action::make(K::B, 1, 0)};
  EXPECT_EQ(write_schedule_json(s),
            R"({
  "format": "flexpipe-schedule",
  "version": 1,
  "name": "two",
  "devices": 2,
  "microbatches": 1,
  "stages_per_pipeline": 2,
  "pipelines": 1,
  "placement": [0,1],
  "custom_ops": [
    {"after":[{"all_microbatches":true,"kind":"W","stage_offset":0}],"before":[],"communicates":false,"duration":1.5,"memory":0.0,"name":"FLUSH","per_microbatch":false}
  ],
  "actions": [
    ["0F0","0B0","0FLUSH"],
    ["1F0","1B0"]
  ]
}
)");
}

TEST(ScheduleJson, TwoPipelinesWriteTheirMicroBatchPipelines) {
  const json doc = schedule_to_json(rich_schedule());
  EXPECT_EQ(doc.at("pipelines"), 2);
  EXPECT_EQ(doc.at("placement"), json::parse("[0,1,1,0]"));
  EXPECT_EQ(doc.at("microbatch_pipeline"), json::parse("[0,1]"));
  EXPECT_FALSE(schedule_to_json(make_builtin("1f1b", {2, 2, 0})).contains("microbatch_pipeline"));
  EXPECT_FALSE(schedule_to_json(make_builtin("1f1b", {2, 2, 0})).contains("custom_ops"));
}

TEST(ScheduleJson, OptionalFieldsTakeTheirDefaults) {
  json doc = minimal();
  doc.erase("pipelines");
  doc.erase("name");
  doc["custom_ops"] = json::parse(R"([{"name": "SYNC", "after": [{"kind": "B"}]}])");
  doc["actions"][0].push_back("0SYNC0");
  const Schedule s = schedule_from_json(doc, "x");
  EXPECT_EQ(s.num_pipelines, 1);
  EXPECT_EQ(s.name, "");
  ASSERT_EQ(s.custom_ops.size(), 1u);
  EXPECT_EQ(s.custom_ops[0].after, (std::vector<CustomDependency>{{K::B, 0, false}}));
  EXPECT_TRUE(s.custom_ops[0].per_microbatch);
  EXPECT_FALSE(s.custom_ops[0].communicates);
  EXPECT_EQ(s.device_actions[0].back(), Action::custom_op(0, 0, 0));
}

// ---- errors -------------------------------------------------------------------------------------

TEST(ScheduleJsonErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("{\n  \"format\": \"flexpipe-schedule\",\n  oops\n}"),
            "s.json:3:3: JSON syntax error: syntax error while parsing object key - invalid literal; last read: "
            "'\"flexpipe-schedule\",<U+000A>  o'; expected string literal");
  EXPECT_EQ(error_of("{\"a\": [1,\n 2"),
            "s.json:2:3: JSON syntax error: syntax error while parsing array - unexpected end of input; expected ']'");
  EXPECT_EQ(error_of(""),
            "s.json:1:1: JSON syntax error: syntax error while parsing value - unexpected end of input; "
            "expected '[', '{', or a literal");
}

TEST(ScheduleJsonErrors, DocumentShape) {
  EXPECT_EQ(error_of("[]"), "s.json: expected a JSON object with \"format\": \"flexpipe-schedule\", got array");
  EXPECT_EQ(error_with([](json& d) { d["format"] = "flexpipe-costs"; }),
            "s.json: format: expected \"flexpipe-schedule\", got \"flexpipe-costs\"");
  EXPECT_EQ(error_with([](json& d) { d["version"] = 2; }),
            "s.json: version: unsupported version 2 (this build reads version 1)");
  EXPECT_EQ(error_with([](json& d) { d.erase("devices"); }), "s.json: missing field 'devices'");
  EXPECT_EQ(error_with([](json& d) { d["devices"] = "2"; }), "s.json: devices: expected an integer, got \"2\"");
  EXPECT_EQ(error_with([](json& d) { d["devices"] = 2.5; }), "s.json: devices: expected an integer, got 2.5");
  EXPECT_EQ(error_with([](json& d) { d["devices"] = 0; }), "s.json: devices: must be at least 1 (got 0)");
  EXPECT_EQ(error_with([](json& d) { d["devices"] = 5000000000; }), "s.json: devices: 5000000000 is out of range");
  EXPECT_EQ(error_with([](json& d) { d["stages"] = 2; }), "s.json: unknown field 'stages'");
  EXPECT_EQ(error_with([](json& d) { d["name"] = 3; }), "s.json: name: expected a string, got number");
}

TEST(ScheduleJsonErrors, PlacementAndPipelines) {
  EXPECT_EQ(error_with([](json& d) { d["placement"] = {0}; }),
            "s.json: placement: has 1 entries, expected 2 (stages_per_pipeline 2 x pipelines 1)");
  EXPECT_EQ(error_with([](json& d) {
              d["placement"] = {0, 2};
            }),
            "s.json: placement[1]: device 2 does not exist (2 devices)");
  EXPECT_EQ(error_with([](json& d) {
              d["microbatch_pipeline"] = {0, 0};
            }),
            "s.json: microbatch_pipeline: has 2 entries, expected one per micro-batch (1)");
  EXPECT_EQ(error_with([](json& d) { d["microbatch_pipeline"] = {1}; }),
            "s.json: microbatch_pipeline[0]: pipeline 1 does not exist (1 pipelines)");
}

TEST(ScheduleJsonErrors, CustomKinds) {
  auto with_op = [](const char* op) {
    return error_with([&](json& d) { d["custom_ops"] = json::array({json::parse(op)}); });
  };
  EXPECT_EQ(with_op(R"({"after": []})"), "s.json: custom_ops[0]: missing field 'name'");
  EXPECT_EQ(with_op(R"({"name": "my op"})"),
            "s.json: custom_ops[0].name: 'my op' is not a valid custom kind name (upper-case letters, digits and '_')");
  EXPECT_EQ(with_op(R"({"name": "2X"})"),
            "s.json: custom_ops[0].name: '2X' is not a valid custom kind name (it must start with a letter, after the "
            "stage number)");
  EXPECT_EQ(with_op(R"({"name": "X2"})"),
            "s.json: custom_ops[0].name: 'X2' is not a valid custom kind name (it must not end in a digit, before the "
            "micro-batch)");
  EXPECT_EQ(with_op(R"({"name": "SEND_F"})"), "s.json: custom_ops[0].name: 'SEND_F' is a built-in action kind");
  EXPECT_EQ(with_op(R"({"name": "X", "after": [{"kind": "Q"}]})"),
            "s.json: custom_ops[0].after[0].kind: unknown action kind 'Q'");
  EXPECT_EQ(with_op(R"({"name": "X", "before": [{"kind": "F", "stage_offset": "1"}]})"),
            "s.json: custom_ops[0].before[0].stage_offset: expected an integer, got \"1\"");
  EXPECT_EQ(with_op(R"({"name": "X", "before": [{"kind": "F", "all": true}]})"),
            "s.json: custom_ops[0].before[0]: unknown field 'all'");
  EXPECT_EQ(with_op(R"({"name": "X", "duration": "1"})"),
            "s.json: custom_ops[0].duration: expected a number, got string");
  EXPECT_EQ(with_op(R"({"name": "X", "communicates": 1})"),
            "s.json: custom_ops[0].communicates: expected true or false, got 1");
  EXPECT_EQ(error_with([](json& d) { d["custom_ops"] = json::parse(R"([{"name": "X"}, {"name": "X"}])"); }),
            "s.json: custom_ops[1].name: custom kind 'X' is declared twice");
}

TEST(ScheduleJsonErrors, ActionsNameDeviceAndCell) {
  EXPECT_EQ(error_with([](json& d) { d["actions"].erase(1); }),
            "s.json: actions: has 1 device rows, expected one per device (2)");
  EXPECT_EQ(error_with([](json& d) { d["actions"][1] = "1F0"; }), "s.json: actions[1]: expected an array, got string");
  EXPECT_EQ(error_with([](json& d) { d["actions"][1][1] = "1X0"; }),
            "s.json: actions[1][1] (device 1, action 1): cannot parse action '1X0': unknown action type 'X'");
  EXPECT_EQ(error_with([](json& d) { d["actions"][1][1] = 5; }),
            "s.json: actions[1][1] (device 1, action 1): expected an action cell, got 5");
  EXPECT_EQ(error_with([](json& d) { d["actions"][1][0] = "2F0"; }),
            "s.json: actions[1][0] (device 1, action 0): stage 2 does not exist (2 stages)");
  EXPECT_EQ(error_with([](json& d) { d["actions"][0][1] = "0B1"; }),
            "s.json: actions[0][1] (device 0, action 1): micro-batch 1 does not exist (1 micro-batches)");
  EXPECT_EQ(error_with([](json& d) { d["actions"][0][1] = "(0F0;5B0)OVERLAP_F_B"; }),
            "s.json: actions[0][1] (device 0, action 1): stage 5 does not exist (2 stages)");
  // Custom names are known only when declared.
  EXPECT_EQ(error_with([](json& d) { d["actions"][0][1] = "0FLUSH"; }),
            "s.json: actions[0][1] (device 0, action 1): cannot parse action '0FLUSH': unknown action type 'FLUSH'");
}

TEST(ScheduleJsonErrors, MoreMicroBatchesThanActions) {
  EXPECT_EQ(error_with([](json& d) { d["microbatches"] = 2000000000; }),
            "s.json: microbatches: 2000000000 micro-batches, but the schedule has only 4 actions");
}

TEST(ScheduleJsonErrors, WritingRefusesWhatCannotBeReadBack) {
  Schedule s = make_schedule("bad", 1, 1, {0});
  s.custom_ops.resize(1);
  s.custom_ops[0].name = "lower";
  try {
    write_schedule_json(s);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "'lower' is not a valid custom kind name (upper-case letters, digits and '_')");
  }
  s.custom_ops[0].name = "SLOW";
  s.custom_ops[0].duration = std::numeric_limits<double>::infinity();
  try {
    write_schedule_json(s);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "custom kind 'SLOW': duration and memory must be finite to be saved");
  }
  s.custom_ops[0].duration = 1;
  s.device_actions[0] = {Action::make(K::F, 0, 0), Action::custom_op(1, 0, 0)};
  try {
    write_schedule_json(s);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "device 0 #1 0CUSTOM1_0: custom kind #1 is not declared (1 declared)");
  }
}

}  // namespace
}  // namespace flexpipe
