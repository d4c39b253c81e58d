// write_program: a schedule's declarations and each device's actions as program text.
#include "flexpipe/lang/writer.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "checker.h"
#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

constexpr int kActionsPerLine = 12;

std::string list(const std::vector<int32_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += fmt::format("{}{}", i == 0 ? "" : ", ", values[i]);
  return out + "]";
}

std::string dependency(const CustomDependency& dep) {
  const std::string kind(kind_name(dep.kind));
  std::string stage = dep.stage_offset == 0  ? "s"
                      : dep.stage_offset > 0 ? fmt::format("s + {}", dep.stage_offset)
                                             : fmt::format("s - {}", -dep.stage_offset);
  if (dep.all_microbatches) return fmt::format("{}({}, all)", kind, stage);
  return dep.stage_offset == 0 ? kind : fmt::format("{}({})", kind, stage);
}

std::string op_declaration(const CustomOpKind& op) {
  for (char c : op.name)
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      throw Error(fmt::format("custom kind '{}' cannot be written as a program: its name must be upper case", op.name));
  std::string out = fmt::format("op {} {{\n", op.name);
  for (const CustomDependency& d : op.after) out += fmt::format("  after {}\n", dependency(d));
  for (const CustomDependency& d : op.before) out += fmt::format("  before {}\n", dependency(d));
  // {} prints the shortest text that reads back as the same double.
  if (op.duration != 0) out += fmt::format("  duration {}\n", op.duration);
  if (op.memory != 0) out += fmt::format("  memory {}\n", op.memory);
  if (op.communicates) out += "  communicates\n";
  if (!op.per_microbatch) out += "  stagewide\n";
  return out + "}\n";
}

std::string kind_text(const Schedule& s, ActionKind kind, uint16_t custom) {
  if (kind == ActionKind::Custom) return custom < s.custom_ops.size() ? s.custom_ops[custom].name : "?";
  return std::string(kind_name(kind));
}

// Follows, device after device, what the one-argument form K(s) would name (lang::next_microbatch).
class NextMicrobatch {
 public:
  explicit NextMicrobatch(const Schedule& s)
      : s_(s),
        stages_(static_cast<int>(s.stage_device.size())),
        last_((lang::kBuiltinCounterFamilies + s.custom_ops.size()) * std::max(stages_, 1), -1) {}

  // Whether `mb` is what K(stage) would name; then records it, as every action does.
  bool implicit(ActionKind kind, int custom, int stage, int mb) {
    int32_t& last = last_[static_cast<size_t>(lang::counter_family(kind, custom)) * stages_ + stage];
    const int next = lang::next_microbatch(last, s_.num_microbatches, s_.pipeline_of_stage(stage),
                                           [&](int m) { return s_.pipeline_of_microbatch(m); });
    const bool same = mb >= 0 && next == mb && mb < s_.num_microbatches;
    last = mb;
    return same;
  }

 private:
  const Schedule& s_;
  int stages_;
  std::vector<int32_t> last_;  // per (counter family, stage)
};

// `next` set: K(s) where the counter names the action's micro-batch, K(s, mb) elsewhere.
std::string action_text(const Schedule& s, const Action& a, NextMicrobatch* next = nullptr) {
  if (a.kind == ActionKind::Overlap) {
    auto half = [&](ActionKind kind, int stage, int mb) {
      return next && next->implicit(kind, -1, stage, mb) ? fmt::format("{}({})", kind_name(kind), stage)
                                                         : fmt::format("{}({}, {})", kind_name(kind), stage, mb);
    };
    const std::string forward = half(ActionKind::F, a.stage, a.microbatch);
    return forward + " & " + half(a.sub_kind, a.stage2, a.microbatch2);
  }
  const bool stagewide = a.kind == ActionKind::Opt || (a.kind == ActionKind::Custom && a.custom < s.custom_ops.size() &&
                                                       !s.custom_ops[a.custom].per_microbatch);
  const std::string kind = kind_text(s, a.kind, a.custom);
  if (stagewide != (a.microbatch < 0))
    throw Error(fmt::format("action {} cannot be written as a program: {}", s.action_name(a),
                            stagewide ? "a stage-wide action has no micro-batch" : "it has no micro-batch"));
  if (a.kind == ActionKind::Custom && a.custom >= s.custom_ops.size())
    throw Error(fmt::format("action {} names an undeclared custom kind", s.action_name(a)));
  const int custom = a.kind == ActionKind::Custom ? a.custom : -1;
  if (stagewide || (next && next->implicit(a.kind, custom, a.stage, a.microbatch)))
    return fmt::format("{}({})", kind, a.stage);
  return fmt::format("{}({}, {})", kind, a.stage, a.microbatch);
}

// A device's list as nested runs: an item is one action or `repeat times { body }`.
struct Item {
  int token = -1;  // index into the device's distinct action texts; -1 for a repeat
  int times = 0;
  std::vector<Item> body;
};

// Greedy left to right: at each position the block that, repeated back to back, saves the most
// actions (ties: the shorter block), compressed again inside. A single action needs three in a row
// and a longer block two, so that `repeat` never makes the text longer.
std::vector<Item> compress(const int* tokens, int n) {
  constexpr int kLongestBlock = 64;
  std::vector<Item> out;
  for (int i = 0; i < n;) {
    int best_length = 0, best_times = 0, best_saved = 1;
    for (int length = 1; length <= kLongestBlock && i + 2 * length <= n; ++length) {
      int times = 1;
      while (i + (times + 1) * length <= n && std::equal(tokens + i, tokens + i + length, tokens + i + times * length))
        ++times;
      const int saved = (times - 1) * length;
      if (saved > best_saved) best_length = length, best_times = times, best_saved = saved;
    }
    if (best_length == 0) {
      out.push_back({tokens[i], 0, {}});
      ++i;
      continue;
    }
    out.push_back({-1, best_times, compress(tokens + i, best_length)});
    i += best_length * best_times;
  }
  return out;
}

bool flat(const std::vector<Item>& items) {
  return std::all_of(items.begin(), items.end(), [](const Item& item) { return item.token >= 0; });
}

void render(const std::vector<Item>& items, const std::vector<std::string>& texts, const std::string& indent,
            std::string& out) {
  std::string line;
  int on_line = 0;
  auto flush = [&] {
    if (!line.empty()) out += indent + line + "\n";
    line.clear();
    on_line = 0;
  };
  for (const Item& item : items) {
    if (item.token >= 0) {
      if (on_line == kActionsPerLine) flush();
      line += (line.empty() ? "" : "  ") + texts[item.token];
      ++on_line;
      continue;
    }
    flush();
    if (flat(item.body) && static_cast<int>(item.body.size()) <= kActionsPerLine) {
      std::string body;
      for (const Item& inner : item.body) body += (body.empty() ? "" : "  ") + texts[inner.token];
      out += fmt::format("{}repeat {} {{ {} }}\n", indent, item.times, body);
    } else {
      out += fmt::format("{}repeat {} {{\n", indent, item.times);
      render(item.body, texts, indent + "  ", out);
      out += indent + "}\n";
    }
  }
  flush();
}

std::string compact_device(const Schedule& s, const std::vector<Action>& actions, NextMicrobatch& next) {
  std::vector<std::string> texts;
  std::map<std::string, int> ids;
  std::vector<int> tokens;
  for (const Action& a : actions) {
    const auto [it, added] = ids.emplace(action_text(s, a, &next), static_cast<int>(texts.size()));
    if (added) texts.push_back(it->first);
    tokens.push_back(it->second);
  }
  std::string out;
  render(compress(tokens.data(), static_cast<int>(tokens.size())), texts, "  ", out);
  return out;
}

}  // namespace

std::string write_program(const Schedule& s, ProgramStyle style) {
  const bool compact = style == ProgramStyle::Compact;
  std::string out = fmt::format("# Schedule \"{}\": every device's actions in order{}.\n", s.name,
                                compact ? "; K(s) is stage s's next micro-batch" : "");
  std::string name;
  for (char c : s.name) {
    if (c == '"' || c == '\\') name += '\\';
    if (c == '\n') throw Error("a schedule name with a line break cannot be written as a program");
    name += c;
  }
  out += fmt::format("name \"{}\"\n", name);
  out += fmt::format("devices {}\nmicrobatches {}\n", s.num_devices, s.num_microbatches);
  const int stages = static_cast<int>(s.stage_device.size());
  if (s.stage_device == loop_placement(s.num_devices, stages))
    out += fmt::format("stages {}\n", stages);
  else if (s.stage_device == v_placement(s.num_devices, stages))
    out += fmt::format("stages {} placed vshape\n", stages);
  else
    out += fmt::format("stages {} placed {}\n", stages, list(s.stage_device));
  if (!s.microbatch_pipeline.empty())
    out += fmt::format("pipelines {} route {}\n", s.num_pipelines, list(s.microbatch_pipeline));
  else if (s.num_pipelines != 1)
    throw Error(
        fmt::format("schedule '{}' has {} pipelines but no route for its micro-batches", s.name, s.num_pipelines));
  for (const CustomOpKind& op : s.custom_ops) out += op_declaration(op);
  NextMicrobatch next(s);  // the counters run through the devices in the order they are written
  for (int d = 0; d < s.num_devices && d < static_cast<int>(s.device_actions.size()); ++d) {
    const auto& actions = s.device_actions[d];
    if (compact) {
      out += actions.empty() ? fmt::format("on {} {{}}\n", d)
                             : fmt::format("on {} {{\n{}}}\n", d, compact_device(s, actions, next));
      continue;
    }
    out += fmt::format("on {} {{", d);
    for (size_t i = 0; i < actions.size(); ++i) {
      out += i % kActionsPerLine == 0 ? "\n  " : "  ";
      out += action_text(s, actions[i]);
    }
    out += actions.empty() ? "}\n" : "\n}\n";
  }
  return out;
}

}  // namespace flexpipe
