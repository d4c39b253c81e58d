// The verifier: action counts, dependencies, placement, communication pairing and deadlock freedom.
#include "flexpipe/validate/validator.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "flexpipe/support/error.h"
#include "validator_detail.h"

namespace flexpipe {

std::string Diagnostic::to_string() const {
  if (device < 0) return message;
  if (position < 0) return fmt::format("device {}: {}", device, message);
  return fmt::format("device {} #{} {}: {}", device, position, action, message);
}

namespace {

using validator::ActionTable;
using validator::slot_of;

constexpr int kF = slot_of(ActionKind::F);
constexpr int kB = slot_of(ActionKind::B);
constexpr int kI = slot_of(ActionKind::I);
constexpr int kW = slot_of(ActionKind::W);
constexpr int kR = slot_of(ActionKind::R);
constexpr int kSendF = slot_of(ActionKind::SendF);
constexpr int kRecvF = slot_of(ActionKind::RecvF);
constexpr int kSendB = slot_of(ActionKind::SendB);
constexpr int kRecvB = slot_of(ActionKind::RecvB);
constexpr int kOffload = slot_of(ActionKind::Offload);
constexpr int kReload = slot_of(ActionKind::Reload);
constexpr int kOpt = slot_of(ActionKind::Opt);

// Overlap and custom actions are not addressable by kind alone, so a dependency cannot name them.
bool is_dependency_kind(ActionKind kind) {
  return static_cast<int>(kind) < kNumActionKinds && kind != ActionKind::Overlap && kind != ActionKind::Custom;
}

struct CustomAction {
  int device;
  int position;
  Action action;
};

// Applies rules 1-5 in turn, collecting every error, then rule 6 when they all hold.
class Checker {
 public:
  explicit Checker(const Schedule& schedule) : s_(schedule) {}

  std::vector<Diagnostic> run() {
    if (!check_shape()) return std::move(out_);
    table_.emplace(s_.num_stages(), s_.num_microbatches, static_cast<int>(s_.custom_ops.size()));
    microbatches_of_pipeline_.assign(s_.num_pipelines, {});
    for (int m = 0; m < s_.num_microbatches; ++m) microbatches_of_pipeline_[s_.pipeline_of_microbatch(m)].push_back(m);

    check_custom_declarations();
    index_actions();
    check_counts();
    check_order();
    check_custom_dependencies();
    if (s_.has_communication()) check_communication();

    std::stable_sort(out_.begin(), out_.end(), [](const Diagnostic& a, const Diagnostic& b) {
      return a.device != b.device ? a.device < b.device : a.position < b.position;
    });
    if (out_.empty())
      if (std::optional<Diagnostic> deadlock = validator::find_deadlock(s_, *table_)) out_.push_back(*deadlock);
    return std::move(out_);
  }

 private:
  // ---- reporting -------------------------------------------------------------------------------

  void report_schedule(std::string message) { out_.push_back({-1, -1, "", std::move(message)}); }

  void report_at(int device, int position, std::string message) {
    out_.push_back({device, position, s_.action_name(s_.device_actions[device][position]), std::move(message)});
  }

  // A required action that is absent: named on the device its stage lives on.
  void report_missing(int slot, int stage, int microbatch, std::string message) {
    out_.push_back({s_.stage_device[stage], -1, name(slot, stage, microbatch), std::move(message)});
  }

  std::string name(int slot, int stage, int microbatch) const {
    return s_.action_name(ActionTable::action_for(slot, stage, microbatch));
  }
  std::string name(int64_t key) const {
    return name(table_->slot_of_key(key), table_->stage_of_key(key), table_->microbatch_of_key(key));
  }

  int device_of(int stage) const { return s_.stage_device[stage]; }
  int position(int slot, int stage, int microbatch) const { return table_->position(slot, stage, microbatch); }
  int64_t key(int slot, int stage, int microbatch) const { return table_->key(slot, stage, microbatch); }

  // ---- rule 1: shape ---------------------------------------------------------------------------

  // False when the schedule's frame is too broken to interpret its actions.
  bool check_shape() {
    size_t reported = out_.size();
    if (s_.num_devices <= 0)
      report_schedule(fmt::format("schedule has {} devices; it needs at least one", s_.num_devices));
    if (s_.num_microbatches <= 0)
      report_schedule(fmt::format("schedule has {} micro-batches; it needs at least one", s_.num_microbatches));
    if (s_.stages_per_pipeline <= 0 || s_.num_pipelines <= 0)
      report_schedule(fmt::format("schedule has {} stages per pipeline and {} pipelines; it needs at least one of each",
                                  s_.stages_per_pipeline, s_.num_pipelines));
    if (out_.size() > reported) return false;

    if (static_cast<int64_t>(s_.device_actions.size()) != s_.num_devices)
      report_schedule(
          fmt::format("schedule has {} action lists for {} devices", s_.device_actions.size(), s_.num_devices));
    if (static_cast<int64_t>(s_.stage_device.size()) != s_.num_stages()) {
      report_schedule(
          fmt::format("stage placement lists {} stages, the schedule has {}", s_.stage_device.size(), s_.num_stages()));
    } else {
      for (int st = 0; st < s_.num_stages(); ++st)
        if (s_.stage_device[st] < 0 || s_.stage_device[st] >= s_.num_devices)
          report_schedule(fmt::format("stage {} is placed on device {}, which does not exist ({} devices)", st,
                                      s_.stage_device[st], s_.num_devices));
    }
    if (s_.microbatch_pipeline.empty()) return out_.size() == reported;
    if (static_cast<int64_t>(s_.microbatch_pipeline.size()) != s_.num_microbatches) {
      report_schedule(fmt::format("micro-batch pipeline map lists {} micro-batches, the schedule has {}",
                                  s_.microbatch_pipeline.size(), s_.num_microbatches));
    } else {
      for (int m = 0; m < s_.num_microbatches; ++m)
        if (s_.microbatch_pipeline[m] < 0 || s_.microbatch_pipeline[m] >= s_.num_pipelines)
          report_schedule(fmt::format("micro-batch {} is assigned to pipeline {}, which does not exist ({} pipelines)",
                                      m, s_.microbatch_pipeline[m], s_.num_pipelines));
    }
    return out_.size() == reported;
  }

  void check_custom_declarations() {
    for (const CustomOpKind& op : s_.custom_ops) {
      for (const CustomDependency& dep : op.after)
        if (!is_dependency_kind(dep.kind))
          report_schedule(
              fmt::format("custom kind {}: an `after` dependency cannot name {}", op.name, kind_name(dep.kind)));
      for (const CustomDependency& dep : op.before)
        if (!is_dependency_kind(dep.kind))
          report_schedule(
              fmt::format("custom kind {}: a `before` dependency cannot name {}", op.name, kind_name(dep.kind)));
    }
  }

  // Empty when one action (or Overlap half) is well formed.
  std::string half_shape_error(const Action& half) const {
    if (half.stage < 0 || half.stage >= s_.num_stages())
      return fmt::format("stage {} does not exist ({} stages)", half.stage, s_.num_stages());
    bool stage_wide = half.kind == ActionKind::Opt;
    if (half.kind == ActionKind::Custom) {
      if (half.custom >= s_.custom_ops.size())
        return fmt::format("custom kind {} is not declared ({} declared)", half.custom, s_.custom_ops.size());
      stage_wide = !s_.custom_ops[half.custom].per_microbatch;
    }
    if (stage_wide) {
      if (half.microbatch != -1) {
        std::string_view kind =
            half.kind == ActionKind::Custom ? std::string_view(s_.custom_ops[half.custom].name) : kind_name(half.kind);
        return fmt::format("{} is stage-wide and takes no micro-batch", kind);
      }
    } else if (half.microbatch < 0 || half.microbatch >= s_.num_microbatches) {
      return fmt::format("micro-batch {} does not exist ({} micro-batches)", half.microbatch, s_.num_microbatches);
    }
    return {};
  }

  std::string action_shape_error(const Action& action) const {
    if (static_cast<int>(action.kind) >= kNumActionKinds)
      return fmt::format("unknown action kind {}", static_cast<int>(action.kind));
    if (action.kind != ActionKind::Overlap) return half_shape_error(action);
    if (!is_backward(action.sub_kind))
      return fmt::format("an overlap's backward half must be B or I, not {}", kind_name(action.sub_kind));
    std::string error = half_shape_error(action.forward_half());
    return error.empty() ? half_shape_error(action.backward_half()) : error;
  }

  // ---- rules 1-3: record every well-formed, well-placed action; placement and duplicates ------

  void index_actions() {
    for (int d = 0; d < s_.num_devices; ++d) {
      const std::vector<Action>& list = s_.device_actions[d];
      for (int p = 0; p < static_cast<int>(list.size()); ++p) {
        if (std::string error = action_shape_error(list[p]); !error.empty()) {
          report_at(d, p, std::move(error));
          continue;
        }
        validator::Halves halves = validator::halves_of(list[p]);
        for (int h = 0; h < halves.count; ++h) index_half(d, p, halves.part[h]);
      }
    }
  }

  void index_half(int device, int position, const Action& half) {
    if (device_of(half.stage) != device) {
      report_at(device, position,
                fmt::format("wrong placement: stage {} is on device {}", half.stage, device_of(half.stage)));
      return;
    }
    int stage_pipeline = s_.pipeline_of_stage(half.stage);
    if (half.microbatch >= 0 && s_.pipeline_of_microbatch(half.microbatch) != stage_pipeline) {
      report_at(device, position,
                fmt::format("micro-batch {} runs in pipeline {}, stage {} belongs to pipeline {}", half.microbatch,
                            s_.pipeline_of_microbatch(half.microbatch), half.stage, stage_pipeline));
      return;
    }
    int earlier = table_->record(slot_of(half), half.stage, half.microbatch, position);
    if (earlier >= 0)
      report_at(device, position, fmt::format("duplicate: {} already at #{}", s_.action_name(half), earlier));
    else if (half.kind == ActionKind::Custom)
      customs_.push_back({device, position, half});
  }

  // ---- rule 3: counts per (stage, micro-batch) ------------------------------------------------

  template <typename Visit>
  void for_each_stage_microbatch(Visit visit) const {
    for (int st = 0; st < s_.num_stages(); ++st)
      for (int m : microbatches_of_pipeline_[s_.pipeline_of_stage(st)]) visit(st, m);
  }

  void check_counts() {
    for_each_stage_microbatch([&](int st, int m) {
      if (position(kF, st, m) < 0) report_missing(kF, st, m, fmt::format("missing {}", name(kF, st, m)));

      int full = position(kB, st, m), input = position(kI, st, m), weight = position(kW, st, m);
      if (full >= 0) {
        for (int split : {input, weight})
          if (split >= 0)
            report_at(device_of(st), split,
                      fmt::format("mixes split and full backward: {} at #{}", name(kB, st, m), full));
      } else if (input < 0 && weight < 0) {
        report_missing(kB, st, m,
                       fmt::format("missing {} (or {} and {})", name(kB, st, m), name(kI, st, m), name(kW, st, m)));
      } else if (input < 0) {
        report_missing(kI, st, m, fmt::format("missing {}", name(kI, st, m)));
      } else if (weight < 0) {
        report_missing(kW, st, m, fmt::format("missing {}", name(kW, st, m)));
      }

      int offload = position(kOffload, st, m), reload = position(kReload, st, m);
      if (offload >= 0 && reload < 0)
        report_missing(kReload, st, m,
                       fmt::format("missing {} for {} (#{})", name(kReload, st, m), name(kOffload, st, m), offload));
      if (reload >= 0 && offload < 0)
        report_at(device_of(st), reload, fmt::format("reloads nothing: no {}", name(kOffload, st, m)));
    });
  }

  // ---- rules 3-4: order on one device ---------------------------------------------------------

  enum class Blame { Earlier, Later };

  // When both actions exist on one device, `earlier` must come first; the error names the action
  // that is out of place.
  void require_order(int64_t earlier, int64_t later, Blame blame) {
    int e = table_->position(earlier), l = table_->position(later);
    if (e < 0 || l < 0 || e < l) return;
    int device = device_of(table_->stage_of_key(earlier));
    if (device != device_of(table_->stage_of_key(later))) return;
    if (blame == Blame::Later)
      report_at(device, l, fmt::format("must run after {} (#{})", name(earlier), e));
    else
      report_at(device, e, fmt::format("must run before {} (#{})", name(later), l));
  }

  void check_order() {
    for_each_stage_microbatch([&](int st, int m) {
      int64_t forward = key(kF, st, m), backward = table_->backward_key(st, m);
      if (int prev = s_.prev_stage(st); prev >= 0) require_order(key(kF, prev, m), forward, Blame::Later);
      if (int next = s_.next_stage(st); next >= 0) require_order(table_->backward_key(next, m), backward, Blame::Later);
      require_order(forward, backward, Blame::Later);
      require_order(key(kI, st, m), key(kW, st, m), Blame::Later);

      int64_t recompute = key(kR, st, m), offload = key(kOffload, st, m), reload = key(kReload, st, m);
      require_order(forward, recompute, Blame::Later);
      require_order(recompute, backward, Blame::Earlier);
      require_order(forward, offload, Blame::Later);
      require_order(offload, reload, Blame::Later);
      require_order(reload, backward, Blame::Earlier);
      require_order(reload, recompute, Blame::Earlier);
    });

    for (int st = 0; st < s_.num_stages(); ++st) {
      int opt = position(kOpt, st, -1);
      if (opt < 0) continue;
      const validator::StageExtent& full = table_->extent(kB, st);
      const validator::StageExtent& weight = table_->extent(kW, st);
      bool weight_last = weight.last > full.last;
      int last = weight_last ? weight.last : full.last;
      if (last > opt)
        report_at(device_of(st), opt,
                  fmt::format("must run after {} (#{})",
                              name(weight_last ? kW : kB, st,
                                   weight_last ? weight.last_microbatch : full.last_microbatch),
                              last));
    }
  }

  // ---- rule 3: custom kinds' declared dependencies, where both ends share a device -------------

  void check_custom_dependencies() {
    for (const CustomAction& c : customs_) {
      const CustomOpKind& op = s_.custom_ops[c.action.custom];
      for (const CustomDependency& dep : op.after) {
        std::optional<int> target = local_dependency_stage(c, dep);
        if (!target) continue;
        int slot = slot_of(dep.kind);
        int last =
            dep.all_microbatches ? table_->extent(slot, *target).last : position(slot, *target, c.action.microbatch);
        int last_mb = dep.all_microbatches ? table_->extent(slot, *target).last_microbatch : c.action.microbatch;
        if (last >= c.position)
          report_at(c.device, c.position, fmt::format("must run after {} (#{})", name(slot, *target, last_mb), last));
      }
      for (const CustomDependency& dep : op.before) {
        std::optional<int> target = local_dependency_stage(c, dep);
        if (!target) continue;
        int slot = slot_of(dep.kind);
        int first =
            dep.all_microbatches ? table_->extent(slot, *target).first : position(slot, *target, c.action.microbatch);
        int first_mb = dep.all_microbatches ? table_->extent(slot, *target).first_microbatch : c.action.microbatch;
        if (first >= 0 && first <= c.position)
          report_at(c.device, c.position,
                    fmt::format("must run before {} (#{})", name(slot, *target, first_mb), first));
      }
    }
  }

  // The stage a dependency names when it exists in the custom action's pipeline and lives on the
  // same device; other dependencies are the deadlock check's business.
  std::optional<int> local_dependency_stage(const CustomAction& c, const CustomDependency& dep) const {
    if (!is_dependency_kind(dep.kind)) return std::nullopt;
    int64_t chunk = int64_t{s_.chunk_of_stage(c.action.stage)} + dep.stage_offset;
    if (chunk < 0 || chunk >= s_.stages_per_pipeline) return std::nullopt;
    int target = c.action.stage + dep.stage_offset;
    if (device_of(target) != c.device) return std::nullopt;
    return target;
  }

  // ---- rule 5: communication of a lowered schedule --------------------------------------------

  void check_communication() {
    for (int st = 0; st < s_.num_stages(); ++st) {
      int next = s_.next_stage(st), prev = s_.prev_stage(st);
      bool remote_next = next >= 0 && device_of(next) != device_of(st);
      bool remote_prev = prev >= 0 && device_of(prev) != device_of(st);
      std::string no_remote_next = next < 0 ? fmt::format("misplaced: stage {} has no next stage", st)
                                            : fmt::format("misplaced: next stage {} is on this device too", next);
      std::string no_remote_prev = prev < 0 ? fmt::format("misplaced: stage {} has no previous stage", st)
                                            : fmt::format("misplaced: previous stage {} is on this device too", prev);
      for (int m : microbatches_of_pipeline_[s_.pipeline_of_stage(st)]) {
        if (remote_next) {
          require_present(kSendF, st, m, next);
          require_present(kRecvB, st, m, next);
          require_order(key(kF, st, m), key(kSendF, st, m), Blame::Later);
          require_order(key(kRecvB, st, m), table_->backward_key(st, m), Blame::Earlier);
        } else {
          report_if_present(kSendF, st, m, no_remote_next);
          report_if_present(kRecvB, st, m, no_remote_next);
        }
        if (remote_prev) {
          require_present(kRecvF, st, m, prev);
          require_present(kSendB, st, m, prev);
          require_order(key(kRecvF, st, m), key(kF, st, m), Blame::Earlier);
          require_order(table_->backward_key(st, m), key(kSendB, st, m), Blame::Later);
        } else {
          report_if_present(kRecvF, st, m, no_remote_prev);
          report_if_present(kSendB, st, m, no_remote_prev);
        }
      }
    }
  }

  void require_present(int slot, int stage, int microbatch, int peer_stage) {
    if (position(slot, stage, microbatch) < 0)
      report_missing(slot, stage, microbatch,
                     fmt::format("missing {} (stage {} is on device {})", name(slot, stage, microbatch), peer_stage,
                                 device_of(peer_stage)));
  }

  void report_if_present(int slot, int stage, int microbatch, const std::string& message) {
    if (int p = position(slot, stage, microbatch); p >= 0) report_at(device_of(stage), p, message);
  }

  const Schedule& s_;
  std::vector<Diagnostic> out_;
  std::optional<ActionTable> table_;
  std::vector<std::vector<int>> microbatches_of_pipeline_;
  std::vector<CustomAction> customs_;
};

}  // namespace

std::vector<Diagnostic> validate(const Schedule& schedule) { return Checker(schedule).run(); }

void check_valid(const Schedule& schedule) {
  std::vector<Diagnostic> diagnostics = validate(schedule);
  if (diagnostics.empty()) return;
  std::string message;
  for (const Diagnostic& d : diagnostics) {
    if (!message.empty()) message += '\n';
    message += d.to_string();
  }
  throw Error(message);
}

}  // namespace flexpipe
