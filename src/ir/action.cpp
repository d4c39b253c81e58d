// Action kinds' names and predicates, and an action's cell text ("0F3", "1SEND_B2").
#include "flexpipe/ir/action.h"

#include <fmt/format.h>

namespace flexpipe {

bool is_compute(ActionKind kind) {
  switch (kind) {
    case ActionKind::F:
    case ActionKind::B:
    case ActionKind::I:
    case ActionKind::W:
    case ActionKind::R:
    case ActionKind::Opt:
    case ActionKind::Overlap: return true;
    default: return false;
  }
}

bool is_communication(ActionKind kind) {
  return kind == ActionKind::SendF || kind == ActionKind::RecvF || kind == ActionKind::SendB ||
         kind == ActionKind::RecvB;
}

bool is_backward(ActionKind kind) { return kind == ActionKind::B || kind == ActionKind::I; }

std::string_view kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::F: return "F";
    case ActionKind::B: return "B";
    case ActionKind::I: return "I";
    case ActionKind::W: return "W";
    case ActionKind::R: return "R";
    case ActionKind::SendF: return "SEND_F";
    case ActionKind::RecvF: return "RECV_F";
    case ActionKind::SendB: return "SEND_B";
    case ActionKind::RecvB: return "RECV_B";
    case ActionKind::Offload: return "OFFLOAD";
    case ActionKind::Reload: return "RELOAD";
    case ActionKind::Opt: return "OPT";
    case ActionKind::Overlap: return "OVERLAP_F_B";
    case ActionKind::Custom: return "CUSTOM";
  }
  return "?";
}

namespace {
std::string cell(int stage, std::string_view kind, int microbatch) {
  if (microbatch < 0) return fmt::format("{}{}", stage, kind);
  return fmt::format("{}{}{}", stage, kind, microbatch);
}
}  // namespace

std::string to_string(const Action& action) {
  if (action.kind == ActionKind::Overlap) {
    return fmt::format("({};{})OVERLAP_F_B", to_string(action.forward_half()), to_string(action.backward_half()));
  }
  if (action.kind == ActionKind::Custom) {
    return cell(action.stage, fmt::format("CUSTOM{}_", action.custom), action.microbatch);
  }
  return cell(action.stage, kind_name(action.kind), action.microbatch);
}

}  // namespace flexpipe
