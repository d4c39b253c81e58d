// The text views: a devices x time grid of a simulated schedule, and the plain per-device order.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "flexpipe/views/views.h"
#include "view_common.h"

namespace flexpipe {

namespace {

// A grid row of a long schedule must stay printable; past this a finer step is a mistake.
constexpr double kMaxColumns = 1'000'000;

struct GridLegend {
  bool kinds[kNumActionKinds] = {};
  std::vector<bool> customs;
};

// The compact label of a compute action: kind letter(s) and micro-batch. Chunks are told apart by
// case (lower case: the device's second chunk) or, when a device holds more than two, by a prefix.
std::string grid_label(const Schedule& schedule, const Action& action, int chunk, bool chunk_prefix) {
  std::string kind;
  int microbatch = action.microbatch;
  switch (action.kind) {
    case ActionKind::Opt: kind = "OPT"; break;
    case ActionKind::Overlap: kind = "O"; break;
    case ActionKind::Custom:
      kind = action.custom < schedule.custom_ops.size() ? schedule.custom_ops[action.custom].name.substr(0, 2)
                                                        : std::string("C");
      break;
    default: kind = std::string(kind_name(action.kind)); break;
  }
  if (chunk_prefix)
    kind = std::to_string(chunk) + kind;
  else if (chunk == 1)
    for (char& c : kind) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return microbatch < 0 ? kind : kind + std::to_string(microbatch);
}

std::string legend_line(const Schedule& schedule, const GridLegend& seen, double step, int max_chunks,
                        bool chunk_prefix) {
  static constexpr struct {
    ActionKind kind;
    const char* text;
  } kEntries[] = {
      {ActionKind::F, "F forward"},        {ActionKind::B, "B backward"},
      {ActionKind::I, "I input gradient"}, {ActionKind::W, "W weight gradient"},
      {ActionKind::R, "R recompute"},      {ActionKind::Overlap, "O<m> forward of m overlapped with a backward"},
      {ActionKind::Opt, "OPT optimizer"},
  };
  std::string kinds;
  auto add = [&kinds](const std::string& entry) { kinds += (kinds.empty() ? "" : ", ") + entry; };
  for (const auto& entry : kEntries)
    if (seen.kinds[static_cast<int>(entry.kind)]) add(entry.text);
  for (size_t op = 0; op < seen.customs.size(); ++op)
    if (seen.customs[op]) {
      const std::string& name = schedule.custom_ops[op].name;
      add(fmt::format("{} {}", name.substr(0, 2), name));
    }
  std::string line = "legend: ";
  if (!kinds.empty()) line += kinds + "; ";
  line +=
      fmt::format("-- continues, . idle; 1 column = {} time unit{}", views::format_number(step), step == 1 ? "" : "s");
  if (chunk_prefix)
    line += "; leading number: chunk on the device";
  else if (max_chunks == 2)
    line += "; lower case: second chunk on the device";
  return line;
}

void trim_right(std::string& line) { line.erase(line.find_last_not_of(' ') + 1); }

}  // namespace

std::string render_grid(const Schedule& schedule, const SimResult& result, double step) {
  views::require_timeline(schedule, result, "grid");
  if (!(step >= 0) || std::isinf(step))
    throw Error(fmt::format("grid: the time step must be a positive number (got {})", step));
  if (step == 0) step = views::shortest_compute_duration(schedule, result);
  if (step == 0) step = 1;  // nothing computes: an empty grid

  // Column k covers [k*step, (k+1)*step) and shows the action running at its midpoint, so an action
  // at least one step long always owns a column and two actions never share one.
  const double columns_exact = std::max(0.0, std::ceil(result.makespan / step - 0.5));
  if (columns_exact > kMaxColumns)
    throw Error(
        fmt::format("grid: a step of {} needs {} columns for a makespan of {} (at most {}); "
                    "choose a larger step",
                    views::format_number(step), views::format_number(columns_exact),
                    views::format_number(result.makespan), views::format_number(kMaxColumns)));
  const int64_t columns = static_cast<int64_t>(columns_exact);

  const std::vector<int> chunks = views::chunk_on_device(schedule);
  const int max_chunks = chunks.empty() ? 1 : *std::max_element(chunks.begin(), chunks.end()) + 1;
  const bool chunk_prefix = max_chunks > 2;

  // Labels first: the cell width is the widest label plus a separating space.
  std::vector<std::vector<std::string>> labels(schedule.num_devices);
  GridLegend seen;
  seen.customs.assign(schedule.custom_ops.size(), false);
  size_t label_width = 2;
  for (int d = 0; d < schedule.num_devices; ++d) {
    const auto& actions = schedule.device_actions[d];
    labels[d].resize(actions.size());
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      if (!views::on_compute_stream(schedule, a)) continue;
      labels[d][i] = grid_label(schedule, a, views::chunk_of(chunks, a.stage), chunk_prefix);
      label_width = std::max(label_width, labels[d][i].size());
      seen.kinds[static_cast<int>(a.kind)] = true;
      if (a.kind == ActionKind::Custom && a.custom < seen.customs.size()) seen.customs[a.custom] = true;
    }
  }
  const size_t cell = label_width + 1;
  const std::string idle_cell = "." + std::string(cell - 1, ' ');
  const std::string continued_cell = std::string(cell - 1, '-') + " ";

  const std::string last_device = fmt::format("d{}", std::max(0, schedule.num_devices - 1));
  const size_t name_width = last_device.size();
  std::string out;
  out.reserve((name_width + 2 + cell * columns + 1) * (schedule.num_devices + 1) + 256);

  // Ruler: the time at every tenth column.
  std::string ruler(cell * columns, ' ');
  size_t free_from = 0;
  for (int64_t k = 0; k < columns; k += 10) {
    const std::string mark = views::format_number(k * step);
    const size_t at = static_cast<size_t>(k) * cell;
    if (at < free_from) continue;
    ruler.replace(at, std::min(mark.size(), ruler.size() - at), mark.substr(0, ruler.size() - at));
    free_from = at + mark.size() + 1;
  }
  std::string line = fmt::format("{:<{}} |", "t", name_width) + ruler;
  trim_right(line);
  out += line + "\n";

  for (int d = 0; d < schedule.num_devices; ++d) {
    std::string row;
    row.reserve(cell * columns);
    for (int64_t k = 0; k < columns; ++k) row += idle_cell;
    const auto& actions = schedule.device_actions[d];
    for (size_t i = 0; i < actions.size(); ++i) {
      const Interval& t = result.timeline[d][i];
      if (labels[d][i].empty() || !std::isfinite(t.start) || !std::isfinite(t.end)) continue;
      const int64_t first = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(t.start / step - 0.5)));
      const int64_t last = std::min<int64_t>(columns, static_cast<int64_t>(std::ceil(t.end / step - 0.5)));
      for (int64_t k = first; k < last; ++k) {
        const std::string& text = k == first ? labels[d][i] : continued_cell;
        row.replace(static_cast<size_t>(k) * cell, text.size(), text);
      }
    }
    line = fmt::format("{:<{}} |", fmt::format("d{}", d), name_width) + row;
    trim_right(line);
    out += line + "\n";
  }
  out += legend_line(schedule, seen, step, max_chunks, chunk_prefix) + "\n";
  return out;
}

std::string render_order(const Schedule& schedule) {
  const int devices = static_cast<int>(schedule.device_actions.size());
  const size_t name_width = fmt::format("d{}", std::max(0, devices - 1)).size();
  std::string out;
  for (int d = 0; d < devices; ++d) {
    out += fmt::format("{:<{}} |", fmt::format("d{}", d), name_width);
    for (const Action& a : schedule.device_actions[d]) {
      out += ' ';
      out += schedule.action_name(a);
    }
    out += "\n";
  }
  return out;
}

}  // namespace flexpipe
