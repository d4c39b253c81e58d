// The list scheduler: every device's F, B (or I and W) order by running the pipeline in cost-table time.
#include "flexpipe/search/list_scheduler.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

std::string describe(const ListPolicy& policy) {
  std::string text =
      policy.split_backward
          ? fmt::format("split backward, W {}", policy.weight == WeightTiming::FillIdle ? "fills idle time" : "late")
          : std::string("whole backward");
  text += policy.backward_first ? ", backward first" : ", forward first";
  text += policy.forward == ForwardOrder::Oldest ? ", oldest forward" : ", shallowest forward";
  bool limited = false;
  for (int limit : policy.inflight) limited |= limit > 0;
  if (limited) {
    std::string limits;
    for (int limit : policy.inflight) limits += fmt::format("{}{}", limits.empty() ? "" : ",", limit > 0 ? limit : 0);
    text += fmt::format(", in flight [{}]", limits);
  } else {
    text += ", in flight limited by memory";
  }
  return text;
}

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();
enum Kind : int { kForward = 0, kBackward = 1, kWeight = 2 };

// Frees (or in-flight releases) that happen at known future times, kept sorted so that "the
// earliest time at which at least x is released" is a scan.
struct Releases {
  std::vector<std::pair<double, double>> pending;  // (time, amount), ascending by time
  void add(double time, double amount) {
    auto at = std::upper_bound(pending.begin(), pending.end(), std::make_pair(time, kNever));
    pending.insert(at, {time, amount});
  }
  // Applies everything released at or before `now` and returns the total.
  double commit(double now) {
    double total = 0;
    size_t i = 0;
    while (i < pending.size() && pending[i].first <= now) total += pending[i++].second;
    pending.erase(pending.begin(), pending.begin() + static_cast<long>(i));
    return total;
  }
  // The earliest time >= from at which `needed` more has been released (kNever if never).
  double time_released(double from, double needed) const {
    if (needed <= 0) return from;
    double released = 0;
    for (const auto& [time, amount] : pending) {
      released += amount;
      if (released >= needed - 1e-9 * std::max(1.0, needed)) return std::max(from, time);
    }
    return kNever;
  }
};

struct DeviceState {
  std::vector<int> stages;  // held, ascending
  double free_at = 0;
  double level = 0;  // bytes allocated now (static included), frees committed up to `now`
  double capacity = kNever;
  double reserve = 0;  // room kept for the R / RELOAD a pending backward will allocate
  Releases frees;
  int open = 0;          // forwards started whose backward has not been committed as ended
  Releases closes;       // backward ends, one unit each
  int limit = 0;         // in-flight limit; <= 0: none
  int remaining_fb = 0;  // forwards and backwards not yet started
  // The cached decision: when this device next starts an action, and which.
  double decision = kNever;
  int kind = -1, stage = -1;
  bool dirty = true;
};

class ListScheduler {
 public:
  ListScheduler(Schedule& schedule, const CostTable& costs, const ListPolicy& policy,
                const std::vector<char>& recompute, const std::vector<char>& offload)
      : schedule_(schedule),
        costs_(costs),
        policy_(policy),
        S_(schedule.num_stages()),
        M_(schedule.num_microbatches),
        P_(schedule.num_devices) {
    if (static_cast<int>(costs.stages.size()) < schedule.stages_per_pipeline)
      throw Error(fmt::format("the cost table has {} stages, the schedule {} per pipeline", costs.stages.size(),
                              schedule.stages_per_pipeline));
    // Each pipeline's micro-batches, in order: a stage runs those of its own pipeline.
    pipeline_microbatches_.resize(schedule.num_pipelines);
    for (int mb = 0; mb < M_; ++mb) pipeline_microbatches_[schedule.pipeline_of_microbatch(mb)].push_back(mb);
    recompute_.assign(S_, 0);
    offload_.assign(S_, 0);
    for (int s = 0; s < S_ && s < static_cast<int>(recompute.size()); ++s) recompute_[s] = recompute[s];
    for (int s = 0; s < S_ && s < static_cast<int>(offload.size()); ++s) offload_[s] = offload[s] && !recompute_[s];
    for (int k = 0; k < 3; ++k) {
      end_[k].assign(static_cast<size_t>(S_) * M_, kNever);
      next_[k].assign(S_, 0);
    }
    moved_.assign(static_cast<size_t>(S_) * M_, 0);
    devices_.resize(P_);
    for (int s = 0; s < S_; ++s) devices_[schedule.stage_device[s]].stages.push_back(s);
    for (int d = 0; d < P_; ++d) {
      DeviceState& dev = devices_[d];
      dev.capacity = costs.capacity(d);
      double workspace = 0;  // transient, on top of whatever R or a reload brings back
      for (int s : dev.stages) {
        const StageCosts& c = cost(s);
        dev.level += c.parameter_bytes + c.gradient_bytes + c.optimizer_bytes;
        if (recompute_[s]) dev.reserve = std::max(dev.reserve, c.rebuilt_bytes(policy.split_backward));
        if (offload_[s]) dev.reserve = std::max(dev.reserve, c.activation_bytes);
        workspace = std::max(workspace, c.workspace_bytes);
        dev.remaining_fb += 2 * count(s);
        remaining_ += count(s) * (policy.split_backward ? 3 : 2);
      }
      dev.reserve += workspace;
      dev.limit = d < static_cast<int>(policy.inflight.size()) ? policy.inflight[d] : 0;
      schedule.device_actions[d].clear();
    }
  }

  bool run() {
    while (remaining_ > 0) {
      int chosen = -1;
      for (int d = 0; d < P_; ++d) {
        if (devices_[d].dirty) decide(d);
        if (devices_[d].decision < kNever && (chosen < 0 || devices_[d].decision < devices_[chosen].decision))
          chosen = d;
      }
      if (chosen < 0) return false;
      start(chosen);
    }
    return true;
  }

 private:
  size_t at(int s, int mb) const { return static_cast<size_t>(s) * M_ + mb; }
  const StageCosts& cost(int s) const { return costs_.stages[schedule_.chunk_of_stage(s)]; }
  const std::vector<int>& microbatches(int s) const { return pipeline_microbatches_[schedule_.pipeline_of_stage(s)]; }
  int count(int s) const { return static_cast<int>(microbatches(s).size()); }
  // The next micro-batch of (kind, s), or -1 when all have started.
  int next(int kind, int s) const { return next_[kind][s] < count(s) ? microbatches(s)[next_[kind][s]] : -1; }
  double comm(int from, int to) const {
    const int a = schedule_.stage_device[from], b = schedule_.stage_device[to];
    if (a == b) return 0;
    return costs_.link_between(a, b).transfer_time(cost(std::min(from, to)).output_bytes);
  }
  double duration(int kind, int s) const {
    const StageCosts& c = cost(s);
    if (kind == kForward) return c.forward;
    if (kind == kWeight) return c.backward_weight;
    return (recompute_[s] ? c.recompute : 0) + (policy_.split_backward ? c.backward_input : c.backward);
  }
  // When the data (stage, micro-batch) of `kind` needs has arrived; kNever while a producer has not started.
  double data_ready(int kind, int s, int mb) const {
    if (kind == kForward) return schedule_.is_first_stage(s) ? 0.0 : end_[kForward][at(s - 1, mb)] + comm(s - 1, s);
    if (kind == kWeight) return end_[kBackward][at(s, mb)];
    double ready = end_[kForward][at(s, mb)];
    if (!schedule_.is_last_stage(s)) ready = std::max(ready, end_[kBackward][at(s + 1, mb)] + comm(s + 1, s));
    return ready;
  }
  double forward_bytes(int s) const { return recompute_[s] ? cost(s).checkpoint_bytes : cost(s).activation_bytes; }
  // The earliest time >= from at which a forward of `s` fits the device's memory and in-flight limit.
  double forward_room(const DeviceState& dev, int s, double from) const {
    double when = from;
    if (dev.limit > 0 && dev.open >= dev.limit)
      when = std::max(when, dev.closes.time_released(from, dev.open - dev.limit + 1));
    const double over = dev.level + forward_bytes(s) + dev.reserve - dev.capacity;
    if (over > 0) when = std::max(when, dev.frees.time_released(from, over));
    return when;
  }

  static bool before(int kind, int s, int mb, int s2, int mb2, ForwardOrder order) {
    if (kind == kForward && order == ForwardOrder::Shallow) return s != s2 ? s < s2 : mb < mb2;
    return mb != mb2 ? mb < mb2 : s > s2;
  }

  void decide(int d) {
    DeviceState& dev = devices_[d];
    dev.dirty = false;
    dev.decision = kNever;
    dev.kind = dev.stage = -1;
    int best_rank = 3, best_mb = 0;
    double blocked_from = kNever;  // when a forward has its data but waits for room
    auto consider = [&](int kind, int s, int mb, double est) {
      const int rank = kind == kWeight ? 2 : (kind == kBackward) == policy_.backward_first ? 0 : 1;
      if (est < dev.decision ||
          (est == dev.decision &&
           (rank < best_rank || (rank == best_rank && before(kind, s, mb, dev.stage, best_mb, policy_.forward))))) {
        dev.decision = est;
        dev.kind = kind;
        dev.stage = s;
        best_rank = rank;
        best_mb = mb;
      }
    };
    for (int s : dev.stages) {
      if (const int mb = next(kForward, s); mb >= 0) {
        const double ready = std::max(dev.free_at, data_ready(kForward, s, mb));
        if (ready < kNever) {
          const double room = forward_room(dev, s, ready);
          if (room > ready) blocked_from = std::min(blocked_from, ready);
          consider(kForward, s, mb, room);
        }
      }
      if (const int mb = next(kBackward, s); mb >= 0) {
        // A recompute needs only its own forward: it may run while the gradient is on its way.
        const double lead = recompute_[s] ? cost(s).recompute : 0;
        const double own = end_[kForward][at(s, mb)];
        consider(kBackward, s, mb, std::max({dev.free_at, own, data_ready(kBackward, s, mb) - lead}));
      }
    }
    // Weight gradients compete only where they may run: a decision at an earlier time than the others'
    // (filling idle time), or, when late, once a forward is held back or nothing else is left.
    if (!policy_.split_backward) return;
    for (int s : dev.stages) {
      const int mb = next(kWeight, s);
      if (mb < 0) continue;
      double est = std::max(dev.free_at, data_ready(kWeight, s, mb));
      if (policy_.weight == WeightTiming::Late && dev.remaining_fb > 0) est = std::max(est, blocked_from);
      if (est < kNever) consider(kWeight, s, mb, est);
    }
  }

  void start(int d) {
    DeviceState& dev = devices_[d];
    const int kind = dev.kind, s = dev.stage, mb = next(kind, s);
    const double t = dev.decision;
    const StageCosts& c = cost(s);
    dev.level -= dev.frees.commit(t);
    dev.open -= static_cast<int>(dev.closes.commit(t));
    double end = t + duration(kind, s);
    if (kind == kBackward && recompute_[s])  // R from t, then the backward once its gradient is there
      end = std::max(t + c.recompute, data_ready(kBackward, s, mb)) + duration(kind, s) - c.recompute;
    dev.free_at = end;
    end_[kind][at(s, mb)] = end;
    ++next_[kind][s];
    --remaining_;
    if (kind == kForward) {
      dev.level += forward_bytes(s);
      ++dev.open;
      --dev.remaining_fb;
      if (offload_[s]) {
        moved_[at(s, mb)] = std::min(c.activation_bytes, c.offload_bytes);
        dev.frees.add(end + costs_.host_link.transfer_time(moved_[at(s, mb)]), moved_[at(s, mb)]);
      }
      schedule_.device_actions[d].push_back(Action::make(ActionKind::F, s, mb));
    } else if (kind == kBackward) {
      --dev.remaining_fb;
      const double rebuilt = recompute_[s] ? c.rebuilt_bytes(policy_.split_backward) : c.activation_bytes;
      if (recompute_[s]) dev.level += rebuilt;
      if (offload_[s]) dev.level += moved_[at(s, mb)];
      const double checkpoint = recompute_[s] ? c.checkpoint_bytes : 0;
      dev.frees.add(end, (policy_.split_backward ? c.freed_by_input : rebuilt) + checkpoint);
      if (!policy_.split_backward) dev.closes.add(end, 1);
      schedule_.device_actions[d].push_back(
          Action::make(policy_.split_backward ? ActionKind::I : ActionKind::B, s, mb));
    } else {
      dev.frees.add(end, c.activation_bytes - c.freed_by_input);
      dev.closes.add(end, 1);
      schedule_.device_actions[d].push_back(Action::make(ActionKind::W, s, mb));
    }
    dev.dirty = true;
    // Whose candidates this end time changes: the next stage's forward, the previous stage's backward.
    if (kind == kForward && !schedule_.is_last_stage(s)) devices_[schedule_.stage_device[s + 1]].dirty = true;
    if (kind == kBackward && !schedule_.is_first_stage(s)) devices_[schedule_.stage_device[s - 1]].dirty = true;
  }

  Schedule& schedule_;
  const CostTable& costs_;
  const ListPolicy& policy_;
  const int S_, M_, P_;
  std::vector<char> recompute_, offload_;
  std::vector<double> end_[3];
  std::vector<int> next_[3];
  std::vector<double> moved_;
  std::vector<std::vector<int>> pipeline_microbatches_;
  std::vector<DeviceState> devices_;
  int64_t remaining_ = 0;
};

}  // namespace

bool list_schedule(Schedule& schedule, const CostTable& costs, const ListPolicy& policy,
                   const std::vector<char>& recompute_stage, const std::vector<char>& offload_stage) {
  return ListScheduler(schedule, costs, policy, recompute_stage, offload_stage).run();
}

}  // namespace flexpipe
