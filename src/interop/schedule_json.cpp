// Reads and writes FlexPipe's lossless schedule JSON and the action cells it shares with the CSV.
#include "flexpipe/interop/schedule_json.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "json_reader.h"

namespace flexpipe {

using interop::json_child;
using nlohmann::json;

namespace {

constexpr std::string_view kFormat = "flexpipe-schedule";
constexpr int kVersion = 1;

// Built-in kinds with a cell word of their own. OVERLAP_F_B only appears as a composite's suffix and
// CUSTOM never appears in a cell (custom kinds are written by their declared name).
struct CellWord {
  std::string_view word;
  ActionKind kind;
  bool takes_microbatch;
};
constexpr std::array<CellWord, 12> kBuiltinWords{{
    {"F", ActionKind::F, true},
    {"B", ActionKind::B, true},
    {"I", ActionKind::I, true},
    {"W", ActionKind::W, true},
    {"R", ActionKind::R, true},
    {"SEND_F", ActionKind::SendF, true},
    {"RECV_F", ActionKind::RecvF, true},
    {"SEND_B", ActionKind::SendB, true},
    {"RECV_B", ActionKind::RecvB, true},
    {"OFFLOAD", ActionKind::Offload, true},
    {"RELOAD", ActionKind::Reload, true},
    {"OPT", ActionKind::Opt, false},
}};

constexpr std::string_view kOverlapSuffix = "OVERLAP_F_B";

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool all_digits(std::string_view s) {
  for (char c : s)
    if (!is_digit(c)) return false;
  return true;
}

// Parses a run of decimal digits into an int32; false when it does not fit.
bool parse_number(std::string_view digits, int32_t& value) {
  int64_t v = 0;
  for (char c : digits) {
    v = v * 10 + (c - '0');
    if (v > std::numeric_limits<int32_t>::max()) return false;
  }
  value = static_cast<int32_t>(v);
  return true;
}

// "<stage><WORD>[<micro-batch>]". The longest matching word wins; since custom names may not end in
// a digit (check_custom_name), at most one word leaves only digits behind, so the split is unique.
bool parse_simple_cell(std::string_view cell, const Schedule& schedule, Action& action, std::string& reason) {
  size_t stage_end = 0;
  while (stage_end < cell.size() && is_digit(cell[stage_end])) ++stage_end;
  if (stage_end == 0) {
    reason = "expected a stage number first";
    return false;
  }
  const std::string_view rest = cell.substr(stage_end);

  std::string_view best_word;
  ActionKind kind = ActionKind::F;
  int custom = -1;
  bool takes_microbatch = true;
  auto consider = [&](std::string_view word, ActionKind k, int custom_index, bool with_microbatch) {
    if (word.size() <= best_word.size() || !rest.starts_with(word) || !all_digits(rest.substr(word.size()))) return;
    best_word = word;
    kind = k;
    custom = custom_index;
    takes_microbatch = with_microbatch;
  };
  for (const CellWord& w : kBuiltinWords) consider(w.word, w.kind, -1, w.takes_microbatch);
  for (size_t i = 0; i < schedule.custom_ops.size(); ++i) {
    const CustomOpKind& op = schedule.custom_ops[i];
    consider(op.name, ActionKind::Custom, static_cast<int>(i), op.per_microbatch);
  }
  if (best_word.empty()) {
    size_t word_end = rest.size();
    while (word_end > 0 && is_digit(rest[word_end - 1])) --word_end;
    reason = word_end == 0 ? std::string("missing the action type after the stage")
                           : fmt::format("unknown action type '{}'", printable(rest.substr(0, word_end)));
    return false;
  }

  const std::string_view microbatch_digits = rest.substr(best_word.size());
  int32_t stage = 0, microbatch = -1;
  if (!parse_number(cell.substr(0, stage_end), stage)) {
    reason = fmt::format("stage {} is too large", cell.substr(0, stage_end));
    return false;
  }
  if (takes_microbatch && microbatch_digits.empty()) {
    reason = fmt::format("{} needs a micro-batch", best_word);
    return false;
  }
  if (!takes_microbatch && !microbatch_digits.empty()) {
    reason = fmt::format("{} takes no micro-batch", best_word);
    return false;
  }
  if (!microbatch_digits.empty() && !parse_number(microbatch_digits, microbatch)) {
    reason = fmt::format("micro-batch {} is too large", microbatch_digits);
    return false;
  }
  action = custom >= 0 ? Action::custom_op(static_cast<uint16_t>(custom), stage, microbatch)
                       : Action::make(kind, stage, microbatch);
  return true;
}

// "(<forward>;<backward>)OVERLAP_F_B": a forward and a backward (B or I) run as one unit.
bool parse_overlap_cell(std::string_view cell, const Schedule& schedule, Action& action, std::string& reason) {
  const size_t close = cell.find(')');
  const size_t separator = cell.find(';');
  if (close == std::string_view::npos || separator == std::string_view::npos || separator > close ||
      cell.find(';', separator + 1) < close || cell.substr(close + 1) != kOverlapSuffix) {
    reason = "expected '(FORWARD;BACKWARD)OVERLAP_F_B'";
    return false;
  }
  Action forward, backward;
  const std::string_view forward_text = cell.substr(1, separator - 1);
  const std::string_view backward_text = cell.substr(separator + 1, close - separator - 1);
  if (!parse_simple_cell(forward_text, schedule, forward, reason) ||
      !parse_simple_cell(backward_text, schedule, backward, reason))
    return false;
  if (forward.kind != ActionKind::F) {
    reason = fmt::format("the first half of OVERLAP_F_B must be a forward (F), not '{}'", forward_text);
    return false;
  }
  if (backward.kind != ActionKind::B && backward.kind != ActionKind::I) {
    reason = fmt::format("the second half of OVERLAP_F_B must be a backward (B or I), not '{}'", backward_text);
    return false;
  }
  action = Action::overlap(forward.stage, forward.microbatch, backward.stage, backward.microbatch, backward.kind);
  return true;
}

bool is_builtin_kind_name(std::string_view name) {
  for (int k = 0; k < kNumActionKinds; ++k)
    if (kind_name(static_cast<ActionKind>(k)) == name) return true;
  return false;
}

// Empty when `name` can be a custom kind's name, else why not.
std::string custom_name_problem(const std::string& name) {
  if (name.empty()) return "a custom kind needs a name";
  for (char c : name)
    if (!std::isupper(static_cast<unsigned char>(c)) && !is_digit(c) && c != '_')
      return fmt::format("'{}' is not a valid custom kind name (upper-case letters, digits and '_')", name);
  if (!std::isupper(static_cast<unsigned char>(name.front())))
    return fmt::format("'{}' is not a valid custom kind name (it must start with a letter, after the stage number)",
                       name);
  if (is_digit(name.back()))
    return fmt::format("'{}' is not a valid custom kind name (it must not end in a digit, before the micro-batch)",
                       name);
  if (is_builtin_kind_name(name)) return fmt::format("'{}' is a built-in action kind", name);
  return {};
}

ActionKind kind_from_name(std::string_view name, bool& found) {
  for (int k = 0; k < kNumActionKinds; ++k) {
    const auto kind = static_cast<ActionKind>(k);
    if (kind != ActionKind::Custom && kind_name(kind) == name) {
      found = true;
      return kind;
    }
  }
  found = false;
  return ActionKind::F;
}

json dependencies_to_json(const std::vector<CustomDependency>& dependencies) {
  json out = json::array();
  for (const CustomDependency& d : dependencies)
    out.push_back(
        {{"kind", kind_name(d.kind)}, {"stage_offset", d.stage_offset}, {"all_microbatches", d.all_microbatches}});
  return out;
}

// Reads one JSON document into a Schedule, naming the JSON path of whatever is wrong.
class ScheduleReader : public interop::JsonPathReader {
 public:
  explicit ScheduleReader(const std::string& origin) : JsonPathReader(origin) {}

  Schedule read(const json& root) {
    if (!root.is_object())
      fail("", fmt::format("expected a JSON object with \"format\": \"{}\", got {}", kFormat, root.type_name()));
    check_fields(root, "",
                 {"format", "version", "name", "devices", "microbatches", "stages_per_pipeline", "pipelines",
                  "placement", "microbatch_pipeline", "custom_ops", "actions"});
    check_format_header(root, "schedule", kFormat, kVersion);

    Schedule s;
    s.name = root.contains("name") ? get_string(root, "name", "") : std::string();
    s.num_devices = get_positive(root, "devices");
    s.num_microbatches = get_positive(root, "microbatches");
    s.stages_per_pipeline = get_positive(root, "stages_per_pipeline");
    s.num_pipelines = root.contains("pipelines") ? get_positive(root, "pipelines") : 1;
    read_placement(root, s);
    if (root.contains("microbatch_pipeline")) read_microbatch_pipeline(root, s);
    if (root.contains("custom_ops")) read_custom_ops(root.at("custom_ops"), s);
    read_actions(root, s);
    // Every micro-batch needs a forward on every stage, so more micro-batches than actions is a typo,
    // and one that would make every later pass loop over micro-batches that do not exist.
    if (s.num_microbatches > s.num_actions())
      fail("microbatches",
           fmt::format("{} micro-batches, but the schedule has only {} actions", s.num_microbatches, s.num_actions()));
    return s;
  }

 private:
  void check_fields(const json& object, const std::string& path, std::initializer_list<std::string_view> known) const {
    for (const auto& [key, value] : object.items()) {
      bool ok = false;
      for (std::string_view k : known) ok = ok || k == key;
      if (!ok) fail(path, fmt::format("unknown field '{}'", key));
    }
  }

  const json& field(const json& object, const std::string& key, const std::string& parent) const {
    if (!object.contains(key)) fail(parent, fmt::format("missing field '{}'", key));
    return object.at(key);
  }

  std::string get_string(const json& object, const std::string& key, const std::string& parent) const {
    const json& v = field(object, key, parent);
    if (!v.is_string()) fail(json_child(parent, key), fmt::format("expected a string, got {}", v.type_name()));
    return v.get<std::string>();
  }

  int as_int(const json& v, const std::string& path) const {
    if (!v.is_number_integer()) fail(path, fmt::format("expected an integer, got {}", v.dump()));
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
                               : (v.get<int64_t>() > std::numeric_limits<int32_t>::max() ||
                                  v.get<int64_t>() < std::numeric_limits<int32_t>::min()))
      fail(path, fmt::format("{} is out of range", v.dump()));
    return static_cast<int>(v.get<int64_t>());
  }

  int get_int(const json& object, const std::string& key, const std::string& parent) const {
    return as_int(field(object, key, parent), json_child(parent, key));
  }

  int get_positive(const json& object, const std::string& key) const {
    const int v = get_int(object, key, "");
    if (v < 1) fail(key, fmt::format("must be at least 1 (got {})", v));
    return v;
  }

  double get_number(const json& object, const std::string& key, const std::string& parent) const {
    const json& v = field(object, key, parent);
    if (!v.is_number()) fail(json_child(parent, key), fmt::format("expected a number, got {}", v.type_name()));
    return v.get<double>();
  }

  bool get_bool(const json& object, const std::string& key, const std::string& parent) const {
    const json& v = field(object, key, parent);
    if (!v.is_boolean()) fail(json_child(parent, key), fmt::format("expected true or false, got {}", v.dump()));
    return v.get<bool>();
  }

  const json& get_array(const json& object, const std::string& key, const std::string& parent) const {
    const json& v = field(object, key, parent);
    if (!v.is_array()) fail(json_child(parent, key), fmt::format("expected an array, got {}", v.type_name()));
    return v;
  }

  void read_placement(const json& root, Schedule& s) const {
    const json& placement = get_array(root, "placement", "");
    if (static_cast<int64_t>(placement.size()) != static_cast<int64_t>(s.stages_per_pipeline) * s.num_pipelines)
      fail("placement", fmt::format("has {} entries, expected {} (stages_per_pipeline {} x pipelines {})",
                                    placement.size(), static_cast<int64_t>(s.stages_per_pipeline) * s.num_pipelines,
                                    s.stages_per_pipeline, s.num_pipelines));
    for (size_t i = 0; i < placement.size(); ++i) {
      const std::string path = fmt::format("placement[{}]", i);
      const int device = as_int(placement[i], path);
      if (device < 0 || device >= s.num_devices)
        fail(path, fmt::format("device {} does not exist ({} devices)", device, s.num_devices));
      s.stage_device.push_back(device);
    }
  }

  void read_microbatch_pipeline(const json& root, Schedule& s) const {
    const json& pipelines = get_array(root, "microbatch_pipeline", "");
    if (static_cast<int64_t>(pipelines.size()) != s.num_microbatches)
      fail("microbatch_pipeline",
           fmt::format("has {} entries, expected one per micro-batch ({})", pipelines.size(), s.num_microbatches));
    for (size_t i = 0; i < pipelines.size(); ++i) {
      const std::string path = fmt::format("microbatch_pipeline[{}]", i);
      const int pipeline = as_int(pipelines[i], path);
      if (pipeline < 0 || pipeline >= s.num_pipelines)
        fail(path, fmt::format("pipeline {} does not exist ({} pipelines)", pipeline, s.num_pipelines));
      s.microbatch_pipeline.push_back(pipeline);
    }
  }

  std::vector<CustomDependency> read_dependencies(const json& op, const std::string& key,
                                                  const std::string& parent) const {
    std::vector<CustomDependency> out;
    if (!op.contains(key)) return out;
    const json& list = get_array(op, key, parent);
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = fmt::format("{}.{}[{}]", parent, key, i);
      const json& d = list[i];
      if (!d.is_object()) fail(path, fmt::format("expected an object, got {}", d.type_name()));
      check_fields(d, path, {"kind", "stage_offset", "all_microbatches"});
      CustomDependency dependency;
      const std::string kind = get_string(d, "kind", path);
      bool found = false;
      dependency.kind = kind_from_name(kind, found);
      if (!found) fail(path + ".kind", fmt::format("unknown action kind '{}'", kind));
      if (d.contains("stage_offset")) dependency.stage_offset = get_int(d, "stage_offset", path);
      if (d.contains("all_microbatches")) dependency.all_microbatches = get_bool(d, "all_microbatches", path);
      out.push_back(dependency);
    }
    return out;
  }

  void read_custom_ops(const json& list, Schedule& s) const {
    if (!list.is_array()) fail("custom_ops", fmt::format("expected an array, got {}", list.type_name()));
    if (list.size() > std::numeric_limits<uint16_t>::max())
      fail("custom_ops", fmt::format("{} custom kinds, at most {}", list.size(), std::numeric_limits<uint16_t>::max()));
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = fmt::format("custom_ops[{}]", i);
      const json& o = list[i];
      if (!o.is_object()) fail(path, fmt::format("expected an object, got {}", o.type_name()));
      check_fields(o, path, {"name", "after", "before", "duration", "memory", "communicates", "per_microbatch"});
      CustomOpKind op;
      op.name = get_string(o, "name", path);
      if (std::string problem = custom_name_problem(op.name); !problem.empty()) fail(path + ".name", problem);
      for (const CustomOpKind& earlier : s.custom_ops)
        if (earlier.name == op.name) fail(path + ".name", fmt::format("custom kind '{}' is declared twice", op.name));
      op.after = read_dependencies(o, "after", path);
      op.before = read_dependencies(o, "before", path);
      if (o.contains("duration")) op.duration = get_number(o, "duration", path);
      if (o.contains("memory")) op.memory = get_number(o, "memory", path);
      if (o.contains("communicates")) op.communicates = get_bool(o, "communicates", path);
      if (o.contains("per_microbatch")) op.per_microbatch = get_bool(o, "per_microbatch", path);
      s.custom_ops.push_back(std::move(op));
    }
  }

  void check_range(const Schedule& s, int stage, int microbatch, const std::string& path) const {
    if (stage >= s.num_stages()) fail(path, fmt::format("stage {} does not exist ({} stages)", stage, s.num_stages()));
    if (microbatch >= s.num_microbatches)
      fail(path, fmt::format("micro-batch {} does not exist ({} micro-batches)", microbatch, s.num_microbatches));
  }

  void read_actions(const json& root, Schedule& s) const {
    const json& rows = get_array(root, "actions", "");
    if (static_cast<int64_t>(rows.size()) != s.num_devices)
      fail("actions", fmt::format("has {} device rows, expected one per device ({})", rows.size(), s.num_devices));
    s.device_actions.assign(s.num_devices, {});
    for (int d = 0; d < s.num_devices; ++d) {
      const json& row = rows[d];
      if (!row.is_array())
        fail(fmt::format("actions[{}]", d), fmt::format("expected an array, got {}", row.type_name()));
      std::vector<Action>& actions = s.device_actions[d];
      actions.reserve(row.size());
      for (size_t i = 0; i < row.size(); ++i) {
        const std::string path = fmt::format("actions[{}][{}] (device {}, action {})", d, i, d, i);
        if (!row[i].is_string()) fail(path, fmt::format("expected an action cell, got {}", row[i].dump()));
        Action action;
        std::string error;
        if (!parse_action_cell(row[i].get_ref<const std::string&>(), s, action, error)) fail(path, error);
        check_range(s, action.stage, action.microbatch, path);
        if (action.kind == ActionKind::Overlap) check_range(s, action.stage2, action.microbatch2, path);
        actions.push_back(action);
      }
    }
  }
};

}  // namespace

bool parse_action_cell(const std::string& cell, const Schedule& schedule, Action& action, std::string& error) {
  std::string reason;
  const bool ok = !cell.empty() && cell.front() == '(' ? parse_overlap_cell(cell, schedule, action, reason)
                                                       : parse_simple_cell(cell, schedule, action, reason);
  // A cell is the reader's input, quoted printably: CSV files arrive with stray binary too.
  if (!ok) error = fmt::format("cannot parse action '{}': {}", printable(cell), reason);
  return ok;
}

json schedule_to_json(const Schedule& schedule) {
  json out = interop::format_header<json>(kFormat, kVersion);
  out["name"] = schedule.name;
  out["devices"] = schedule.num_devices;
  out["microbatches"] = schedule.num_microbatches;
  out["stages_per_pipeline"] = schedule.stages_per_pipeline;
  out["pipelines"] = schedule.num_pipelines;
  out["placement"] = schedule.stage_device;
  if (!schedule.microbatch_pipeline.empty()) out["microbatch_pipeline"] = schedule.microbatch_pipeline;
  if (!schedule.custom_ops.empty()) {
    json ops = json::array();
    for (const CustomOpKind& op : schedule.custom_ops) {
      // A file we could not read back would break the round trip, so refuse to write it.
      if (std::string problem = custom_name_problem(op.name); !problem.empty()) throw Error(problem);
      if (!std::isfinite(op.duration) || !std::isfinite(op.memory))
        throw Error(fmt::format("custom kind '{}': duration and memory must be finite to be saved", op.name));
      ops.push_back({{"name", op.name},
                     {"after", dependencies_to_json(op.after)},
                     {"before", dependencies_to_json(op.before)},
                     {"duration", op.duration},
                     {"memory", op.memory},
                     {"communicates", op.communicates},
                     {"per_microbatch", op.per_microbatch}});
    }
    out["custom_ops"] = std::move(ops);
  }
  json rows = json::array();
  for (size_t d = 0; d < schedule.device_actions.size(); ++d) {
    json row = json::array();
    for (size_t i = 0; i < schedule.device_actions[d].size(); ++i) {
      const Action& a = schedule.device_actions[d][i];
      if (a.kind == ActionKind::Custom && a.custom >= schedule.custom_ops.size())
        throw Error(fmt::format("device {} #{} {}: custom kind #{} is not declared ({} declared)", d, i,
                                schedule.action_name(a), a.custom, schedule.custom_ops.size()));
      row.push_back(schedule.action_name(a));
    }
    rows.push_back(std::move(row));
  }
  out["actions"] = std::move(rows);
  return out;
}

std::string write_schedule_json(const Schedule& schedule) {
  const json document = schedule_to_json(schedule);
  constexpr std::array<std::string_view, 11> kFieldOrder{"format",     "version",      "name",
                                                         "devices",    "microbatches", "stages_per_pipeline",
                                                         "pipelines",  "placement",    "microbatch_pipeline",
                                                         "custom_ops", "actions"};
  std::string text = "{";
  bool first = true;
  for (std::string_view key : kFieldOrder) {
    const auto it = document.find(std::string(key));
    if (it == document.end()) continue;
    text += first ? "\n" : ",\n";
    first = false;
    text += fmt::format("  \"{}\": ", key);
    if (key == "custom_ops" || key == "actions") {
      // One element per line: a device's actions, or one custom kind, stay readable and diffable.
      text += "[";
      for (size_t i = 0; i < it->size(); ++i) text += (i == 0 ? "\n    " : ",\n    ") + (*it)[i].dump();
      text += it->empty() ? "]" : "\n  ]";
    } else {
      text += it->dump();
    }
  }
  text += "\n}\n";
  return text;
}

Schedule schedule_from_json(const json& document, const std::string& origin) {
  return ScheduleReader(origin).read(document);
}

Schedule parse_schedule_json(const std::string& text, const std::string& origin) {
  const json document = interop::parse_json_text(text, origin, "JSON syntax error", interop::ColumnUnit::Utf8Character);
  return schedule_from_json(document, origin);
}

}  // namespace flexpipe
