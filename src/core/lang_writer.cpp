#include "flexpipe/lang/writer.h"

#include <fmt/format.h>

#include "flexpipe/core/error.h"

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
  std::string stage = dep.stage_offset == 0 ? "s"
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

std::string action_text(const Schedule& s, const Action& a) {
  if (a.kind == ActionKind::Overlap)
    return fmt::format("F({}, {}) & {}({}, {})", a.stage, a.microbatch, kind_name(a.sub_kind), a.stage2, a.microbatch2);
  const bool stagewide = a.kind == ActionKind::Opt ||
                         (a.kind == ActionKind::Custom && a.custom < s.custom_ops.size() && !s.custom_ops[a.custom].per_microbatch);
  const std::string kind = kind_text(s, a.kind, a.custom);
  if (stagewide != (a.microbatch < 0))
    throw Error(fmt::format("action {} cannot be written as a program: {}", s.action_name(a),
                            stagewide ? "a stage-wide action has no micro-batch" : "it has no micro-batch"));
  if (a.kind == ActionKind::Custom && a.custom >= s.custom_ops.size())
    throw Error(fmt::format("action {} names an undeclared custom kind", s.action_name(a)));
  return stagewide ? fmt::format("{}({})", kind, a.stage) : fmt::format("{}({}, {})", kind, a.stage, a.microbatch);
}

}  // namespace

std::string write_program(const Schedule& s) {
  std::string out = fmt::format("# Schedule \"{}\": every device's actions in order.\n", s.name);
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
    throw Error(fmt::format("schedule '{}' has {} pipelines but no route for its micro-batches", s.name, s.num_pipelines));
  for (const CustomOpKind& op : s.custom_ops) out += op_declaration(op);
  for (int d = 0; d < s.num_devices && d < static_cast<int>(s.device_actions.size()); ++d) {
    const auto& actions = s.device_actions[d];
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
