// The Chrome trace (opens in ui.perfetto.dev and chrome://tracing): a process per device, a thread
// for its compute stream and one per communication link, memory as a counter.
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "flexpipe/views/views.h"
#include "view_common.h"

namespace flexpipe {

namespace {

using nlohmann::json;

// Perfetto reads pid and tid 0 as the kernel's idle task, and a tid seen under two pids as one
// thread that moved: so pid = device + 1 and tid = pid * stride + the thread's slot.
// Transfers on different links overlap in time, and a trace thread must hold properly nested
// slices, so each link gets its own slot; one link is a FIFO.
constexpr int kComputeSlot = 0;
constexpr int kOtherCommSlot = 1;  // communicating custom actions
constexpr int kToHostSlot = 2;
constexpr int kFromHostSlot = 3;
constexpr int kFirstPeerSlot = 4;  // + peer device

double microseconds_per_unit(const std::string& unit) {
  if (unit == "s" || unit == "sec" || unit == "second" || unit == "seconds") return 1e6;
  if (unit == "ms" || unit == "millisecond" || unit == "milliseconds") return 1e3;
  if (unit == "us" || unit == "\u00b5s" || unit == "microsecond" || unit == "microseconds") return 1;
  if (unit == "ns" || unit == "nanosecond" || unit == "nanoseconds") return 1e-3;
  return 1e3;
}

json action_args(const Action& action) {
  json args = {{"stage", action.stage}, {"microbatch", action.microbatch}};
  if (action.kind == ActionKind::Overlap) {
    args["backward_stage"] = action.stage2;
    args["backward_microbatch"] = action.microbatch2;
  }
  return args;
}

class TraceWriter {
 public:
  TraceWriter(const Schedule& schedule, const SimResult& result, double scale)
      : schedule_(schedule), result_(result), scale_(scale) {
    while (stride_ < kFirstPeerSlot + schedule.num_devices) stride_ *= 10;
  }

  std::string write() {
    out_ = "{\"traceEvents\":[\n";
    for (int d = 0; d < schedule_.num_devices; ++d) {
      const std::string name = fmt::format("device {}", d);
      event({{"ph", "M"},
             {"name", "process_name"},
             {"pid", pid(d)},
             {"tid", tid(d, kComputeSlot)},
             {"args", {{"name", name}}}});
      event({{"ph", "M"},
             {"name", "process_sort_index"},
             {"pid", pid(d)},
             {"tid", tid(d, kComputeSlot)},
             {"args", {{"sort_index", d}}}});
      thread(d, kComputeSlot, "compute");
    }
    std::vector<std::vector<bool>> posts_transfer(schedule_.num_devices);
    for (int d = 0; d < schedule_.num_devices; ++d) posts_transfer[d].assign(schedule_.device_actions[d].size(), false);
    for (const Transfer& t : result_.transfers) {
      if (valid_position(t.device, t.position)) posts_transfer[t.device][t.position] = true;
      write_transfer(t);
    }
    for (int d = 0; d < schedule_.num_devices; ++d) {
      const auto& actions = schedule_.device_actions[d];
      for (size_t i = 0; i < actions.size(); ++i) {
        const Action& a = actions[i];
        const Interval& t = result_.timeline[d][i];
        if (views::on_compute_stream(schedule_, a)) {
          slice(d, kComputeSlot, schedule_.action_name(a), "computation", t, action_args(a));
        } else if (!posts_transfer[d][i] && t.end > t.start) {
          thread(d, kOtherCommSlot, "communication");
          slice(d, kOtherCommSlot, schedule_.action_name(a), "communication", t, action_args(a));
        }
      }
      for (const MemorySample& sample : result_.devices[d].memory)
        event({{"ph", "C"},
               {"name", "memory"},
               {"pid", pid(d)},
               {"ts", microseconds(sample.time)},
               {"args", {{"memory", sample.bytes}}}});
    }
    out_ += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":";
    out_ += json({{"schedule", schedule_.name}, {"makespan", result_.makespan}}).dump();
    out_ += "}\n";
    return std::move(out_);
  }

 private:
  bool valid_position(int device, int position) const {
    return device >= 0 && device < schedule_.num_devices && position >= 0 &&
           position < static_cast<int>(schedule_.device_actions[device].size());
  }

  void event(const json& e) {
    if (!first_) out_ += ",\n";
    first_ = false;
    out_ += e.dump();
  }

  int pid(int device) const { return device + 1; }
  int64_t tid(int device, int slot) const { return int64_t{pid(device)} * stride_ + slot; }
  // Rounded to nanoseconds, so that float noise does not show in the trace.
  double microseconds(double time) const { return std::round(time * scale_ * 1000) / 1000; }

  void thread(int device, int slot, const std::string& name) {
    if (!named_threads_.emplace(device, slot).second) return;
    event({{"ph", "M"},
           {"name", "thread_name"},
           {"pid", pid(device)},
           {"tid", tid(device, slot)},
           {"args", {{"name", name}}}});
    event({{"ph", "M"},
           {"name", "thread_sort_index"},
           {"pid", pid(device)},
           {"tid", tid(device, slot)},
           {"args", {{"sort_index", slot}}}});
  }

  void slice(int device, int slot, const std::string& name, const char* category, const Interval& t, json args) {
    const double start = microseconds(t.start);
    event({{"ph", "X"},
           {"name", name},
           {"cat", category},
           {"pid", pid(device)},
           {"tid", tid(device, slot)},
           {"ts", start},
           {"dur", microseconds(t.end) - start},
           {"args", std::move(args)}});
  }

  // On the sender's process (the receiver's for a reload from the host), on the link's thread.
  void write_transfer(const Transfer& t) {
    const int devices = schedule_.num_devices;
    const bool src_ok = t.src >= 0 && t.src < devices;
    const bool dst_ok = t.dst >= 0 && t.dst < devices;
    if (!src_ok && !dst_ok) return;
    int device = 0, slot = 0;
    std::string thread_name;
    if (src_ok && dst_ok) {
      device = t.src, slot = kFirstPeerSlot + t.dst, thread_name = fmt::format("send to device {}", t.dst);
    } else if (src_ok) {
      device = t.src, slot = kToHostSlot, thread_name = "offload to host";
    } else {
      device = t.dst, slot = kFromHostSlot, thread_name = "reload from host";
    }
    thread(device, slot, thread_name);
    json args = {{"src", t.src}, {"dst", t.dst}, {"bytes", t.bytes}};
    std::string name = "transfer";
    if (valid_position(t.device, t.position)) {
      const Action& posting = schedule_.device_actions[t.device][t.position];
      name = schedule_.action_name(posting);
      args["stage"] = posting.stage;
      args["microbatch"] = posting.microbatch;
    }
    slice(device, slot, name, "communication", t.time, std::move(args));
  }

  const Schedule& schedule_;
  const SimResult& result_;
  double scale_;
  int64_t stride_ = 10;
  std::string out_;
  bool first_ = true;
  std::set<std::pair<int, int>> named_threads_;
};

}  // namespace

std::string render_trace(const Schedule& schedule, const SimResult& result, const std::string& time_unit) {
  views::require_timeline(schedule, result, "trace");
  views::require_device_reports(schedule, result, "trace");
  return TraceWriter(schedule, result, microseconds_per_unit(time_unit)).write();
}

}  // namespace flexpipe
