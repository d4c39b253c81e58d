// Reads and writes torch.distributed.pipelining's schedule CSV, compute-only and with communication.
#include "flexpipe/interop/pytorch_csv.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/interop/schedule_json.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"

namespace flexpipe {

namespace {

// PyTorch's stage-wide operations, kept as custom kinds so that files round-trip. None of them
// orders against a micro-batch: UNSHARD and RESHARD follow a sliding prefetch window and may repeat
// for one stage, and REDUCE_GRAD waits for every gradient-producing action of its stage.
CustomOpKind pytorch_unshard() {
  CustomOpKind op;
  op.name = "UNSHARD";  // FSDP all-gather of the stage's parameters
  op.communicates = true;
  op.per_microbatch = false;
  return op;
}
CustomOpKind pytorch_reshard() {
  CustomOpKind op;
  op.name = "RESHARD";  // frees the gathered parameters again
  op.per_microbatch = false;
  return op;
}
CustomOpKind pytorch_reduce_grad() {
  CustomOpKind op;
  op.name = "REDUCE_GRAD";  // data-parallel gradient reduction, once the stage's gradients are complete
  op.after = {{ActionKind::B, 0, true}, {ActionKind::W, 0, true}};
  op.communicates = true;
  op.per_microbatch = false;
  return op;
}

// Cell vocabulary while reading: the three PyTorch kinds above plus the legacy "BW" (full backward),
// which becomes a B once the lettering is known.
enum ReadingCustom : uint16_t { kUnshard, kReshard, kReduceGrad, kLegacyFullBackward, kNumReadingCustoms };

Schedule reading_context() {
  Schedule context;
  context.custom_ops = {pytorch_unshard(), pytorch_reshard(), pytorch_reduce_grad()};
  CustomOpKind legacy_full_backward;
  legacy_full_backward.name = "BW";
  context.custom_ops.push_back(legacy_full_backward);
  return context;
}

struct Cell {
  Action action;
  int line = 0;
  int column = 0;
  std::string text;
};

bool is_blank(char c) { return c == ' ' || c == '\t'; }

// 1-based character columns of byte offsets in one line (UTF-8 continuation bytes do not count).
// A row's cells are located left to right, so the count resumes where the last one stopped: a line of
// n cells costs O(length), not O(n x length).
class ColumnCursor {
 public:
  explicit ColumnCursor(std::string_view line) : line_(line) {}
  int at(size_t offset) {
    if (offset < offset_) {  // not reached while reading left to right; kept correct anyway
      offset_ = 0;
      column_ = 1;
    }
    for (; offset_ < offset; ++offset_)
      if ((static_cast<unsigned char>(line_[offset_]) & 0xC0) != 0x80) ++column_;
    return column_;
  }

 private:
  std::string_view line_;
  size_t offset_ = 0;
  int column_ = 1;
};

// Splits `text` into lines at "\r\n", "\n" or "\r"; the final terminator does not start a new line.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find_first_of("\r\n", start);
    if (end == std::string_view::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + ((text[end] == '\r' && end + 1 < text.size() && text[end + 1] == '\n') ? 2 : 1);
  }
  return lines;
}

class CsvReader {
 public:
  CsvReader(const std::string& origin, const CsvReadOptions& options) : origin_(origin), options_(options) {}

  Schedule read(std::string_view text) {
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // spreadsheet programs add a BOM
    if (text.empty()) throw Error(fmt::format("{}: empty file", origin_));
    const std::vector<std::string_view> lines = split_lines(text);
    rows_.resize(lines.size());
    for (size_t r = 0; r < lines.size(); ++r) read_row(lines[r], static_cast<int>(r) + 1, rows_[r]);
    apply_lettering(resolve_lettering());
    return build();
  }

 private:
  [[noreturn]] void fail(int line, int column, const std::string& message) const {
    throw Error(located(origin_, line, column, message));
  }
  [[noreturn]] void fail(const Cell& cell, const std::string& message) const { fail(cell.line, cell.column, message); }

  // Fields are separated by ','; a field may be quoted ("..." with "" for a quote) and is stripped of
  // blanks, as Python's csv module and PyTorch's _Action.from_str do. Empty fields are idle slots.
  void read_row(std::string_view line, int line_number, std::vector<Cell>& row) {
    ColumnCursor columns(line);
    size_t i = 0;
    while (true) {
      while (i < line.size() && is_blank(line[i])) ++i;
      const size_t start = i;
      std::string content;
      if (i < line.size() && line[i] == '"') {
        ++i;
        while (true) {
          if (i >= line.size()) fail(line_number, columns.at(start), "unterminated quoted cell");
          if (line[i] == '"') {
            if (i + 1 < line.size() && line[i + 1] == '"') {
              content += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          content += line[i++];
        }
        while (i < line.size() && is_blank(line[i])) ++i;
        if (i < line.size() && line[i] != ',') fail(line_number, columns.at(i), "unexpected text after a quoted cell");
      } else {
        const size_t end = std::min(line.find(',', i), line.size());
        size_t last = end;
        while (last > i && is_blank(line[last - 1])) --last;
        content.assign(line.substr(i, last - i));
        i = end;
      }
      while (!content.empty() && is_blank(content.front())) content.erase(content.begin());
      while (!content.empty() && is_blank(content.back())) content.pop_back();
      if (!content.empty()) add_cell(std::move(content), line_number, columns.at(start), row);
      if (i >= line.size()) break;
      ++i;  // the ','
    }
  }

  void add_cell(std::string text, int line, int column, std::vector<Cell>& row) {
    Cell cell{Action{}, line, column, std::move(text)};
    std::string error;
    if (!parse_action_cell(cell.text, context_, cell.action, error)) fail(cell, error);
    const ActionKind kind = cell.action.kind;
    if (kind == ActionKind::R || kind == ActionKind::Offload || kind == ActionKind::Reload || kind == ActionKind::Opt)
      fail(cell, fmt::format("cannot parse action '{}': PyTorch's CSV has no {} action", cell.text, kind_name(kind)));
    row.push_back(std::move(cell));
  }

  static bool is_legacy_full_backward(const Action& a) {
    return a.kind == ActionKind::Custom && a.custom == kLegacyFullBackward;
  }
  static bool is_input_gradient(const Action& a) {
    return a.kind == ActionKind::I || (a.kind == ActionKind::Overlap && a.sub_kind == ActionKind::I);
  }

  // Detect: "BW" only exists in the legacy lettering and "I" only in the current one. A file with
  // neither but with W cells is legacy too: in the current lettering a W must follow an I.
  CsvLettering resolve_lettering() const {
    const Cell* first_bw = nullptr;
    const Cell* first_i = nullptr;
    const Cell* first_w = nullptr;
    for (const auto& row : rows_)
      for (const Cell& cell : row) {
        if (!first_bw && is_legacy_full_backward(cell.action)) first_bw = &cell;
        if (!first_i && is_input_gradient(cell.action)) first_i = &cell;
        if (!first_w && cell.action.kind == ActionKind::W) first_w = &cell;
      }
    switch (options_.lettering) {
      case CsvLettering::Current:
        if (first_bw)
          fail(*first_bw, fmt::format("cannot parse action '{}': BW is the legacy lettering's full backward, "
                                      "but the file is read with the current lettering",
                                      first_bw->text));
        return CsvLettering::Current;
      case CsvLettering::Legacy:
        if (first_i)
          fail(*first_i, fmt::format("cannot parse action '{}': the legacy lettering has no I (its B is the input "
                                     "gradient), but the file is read with the legacy lettering",
                                     first_i->text));
        return CsvLettering::Legacy;
      case CsvLettering::Detect: break;
    }
    if (first_bw && first_i)
      fail(*first_i, fmt::format("'{}' uses the current lettering (I = input gradient), but '{}' at line {}, column {} "
                                 "uses the legacy one (BW = full backward)",
                                 first_i->text, first_bw->text, first_bw->line, first_bw->column));
    if (first_bw || (!first_i && first_w)) return CsvLettering::Legacy;
    return CsvLettering::Current;
  }

  void apply_lettering(CsvLettering lettering) {
    if (lettering != CsvLettering::Legacy) return;
    for (auto& row : rows_)
      for (Cell& cell : row) {
        Action& a = cell.action;
        if (a.kind == ActionKind::B)
          a.kind = ActionKind::I;
        else if (a.kind == ActionKind::Overlap && a.sub_kind == ActionKind::B)
          a.sub_kind = ActionKind::I;
        else if (is_legacy_full_backward(a))
          a = Action::make(ActionKind::B, a.stage, a.microbatch);
      }
  }

  struct StageHome {
    int device;
    const Cell* cell;
  };

  void place(std::map<int, StageHome>& homes, int stage, int device, const Cell& cell) const {
    const auto [it, inserted] = homes.try_emplace(stage, StageHome{device, &cell});
    if (inserted || it->second.device == device) return;
    fail(cell, fmt::format("stage {} is on rank {} here, but on rank {} at line {}, column {} ('{}'); "
                           "a stage belongs to one rank",
                           stage, device, it->second.device, it->second.cell->line, it->second.cell->column,
                           it->second.cell->text));
  }

  Schedule build() const {
    std::map<int, StageHome> homes;
    std::vector<int> microbatches;
    std::array<bool, kNumReadingCustoms> used{};
    for (size_t d = 0; d < rows_.size(); ++d)
      for (const Cell& cell : rows_[d]) {
        const Action& a = cell.action;
        place(homes, a.stage, static_cast<int>(d), cell);
        if (a.microbatch >= 0) microbatches.push_back(a.microbatch);
        if (a.kind == ActionKind::Overlap) {
          place(homes, a.stage2, static_cast<int>(d), cell);
          microbatches.push_back(a.microbatch2);
        }
        if (a.kind == ActionKind::Custom) used[a.custom] = true;
      }
    if (homes.empty()) throw Error(fmt::format("{}: no actions (every cell is empty)", origin_));

    // Stages and micro-batches are inferred from the cells, so each one must show up somewhere.
    const int num_stages = homes.rbegin()->first + 1;
    int expected = 0;
    for (const auto& [stage, home] : homes) {
      if (stage != expected)
        throw Error(fmt::format("{}: stage {} appears in no cell, so its rank is unknown (stages run 0..{})", origin_,
                                expected, num_stages - 1));
      ++expected;
    }
    if (microbatches.empty()) throw Error(fmt::format("{}: no action names a micro-batch", origin_));
    std::sort(microbatches.begin(), microbatches.end());
    microbatches.erase(std::unique(microbatches.begin(), microbatches.end()), microbatches.end());
    for (size_t m = 0; m < microbatches.size(); ++m)
      if (microbatches[m] != static_cast<int>(m))
        throw Error(fmt::format("{}: micro-batch {} appears in no cell (micro-batches run 0..{})", origin_, m,
                                microbatches.back()));

    std::vector<int32_t> placement(num_stages);
    for (const auto& [stage, home] : homes) placement[stage] = home.device;
    Schedule s = make_schedule(std::filesystem::path(origin_).stem().string(), static_cast<int>(rows_.size()),
                               static_cast<int>(microbatches.size()), std::move(placement));

    // Declare only the PyTorch kinds the file uses, in a fixed order, so that equal files give equal schedules.
    std::array<uint16_t, kNumReadingCustoms> custom_index{};
    for (uint16_t k = 0; k < kLegacyFullBackward; ++k)
      if (used[k]) {
        custom_index[k] = static_cast<uint16_t>(s.custom_ops.size());
        s.custom_ops.push_back(context_.custom_ops[k]);
      }
    for (size_t d = 0; d < rows_.size(); ++d) {
      s.device_actions[d].reserve(rows_[d].size());
      for (const Cell& cell : rows_[d]) {
        Action a = cell.action;
        if (a.kind == ActionKind::Custom) a.custom = custom_index[a.custom];
        s.device_actions[d].push_back(a);
      }
    }
    return s;
  }

  const std::string& origin_;
  const CsvReadOptions& options_;
  const Schedule context_ = reading_context();
  std::vector<std::vector<Cell>> rows_;
};

// The cell PyTorch reads for `a`, or why there is none.
bool pytorch_cell(const Schedule& schedule, const Action& a, std::string& cell, std::string& why) {
  switch (a.kind) {
    case ActionKind::F:
    case ActionKind::B:
    case ActionKind::I:
    case ActionKind::W:
    case ActionKind::SendF:
    case ActionKind::RecvF:
    case ActionKind::SendB:
    case ActionKind::RecvB:
    case ActionKind::Overlap: cell = schedule.action_name(a); return true;
    case ActionKind::Custom: {
      if (a.custom >= schedule.custom_ops.size()) {
        why = fmt::format("custom kind #{} is not declared", a.custom);
        return false;
      }
      const std::string& name = schedule.custom_ops[a.custom].name;
      if (name != "UNSHARD" && name != "RESHARD" && name != "REDUCE_GRAD") {
        why = fmt::format("PyTorch's schedule CSV has no {} action", name);
        return false;
      }
      if (a.microbatch >= 0) {
        why = fmt::format("PyTorch's {} is per stage, not per micro-batch", name);
        return false;
      }
      cell = schedule.action_name(a);
      return true;
    }
    default: why = fmt::format("PyTorch's schedule CSV has no {} action", kind_name(a.kind)); return false;
  }
}

}  // namespace

Schedule parse_pytorch_csv(const std::string& text, const std::string& origin, const CsvReadOptions& options) {
  return CsvReader(origin, options).read(text);
}

Schedule load_pytorch_csv(const std::string& path, const CsvReadOptions& options) {
  return parse_pytorch_csv(read_text_file(path), path, options);
}

std::string write_pytorch_csv(const Schedule& schedule) {
  if (schedule.num_pipelines != 1)
    throw Error(fmt::format("PyTorch's schedule CSV holds one pipeline, but '{}' runs {} (save it as .json)",
                            schedule.name, schedule.num_pipelines));
  std::string text;
  for (size_t d = 0; d < schedule.device_actions.size(); ++d) {
    const auto& actions = schedule.device_actions[d];
    for (size_t i = 0; i < actions.size(); ++i) {
      std::string cell, why;
      if (!pytorch_cell(schedule, actions[i], cell, why))
        throw Error(
            fmt::format("device {} #{} {}: {} (save it as .json)", d, i, schedule.action_name(actions[i]), why));
      if (i > 0) text += ',';
      text += cell;
    }
    text += '\n';
  }
  return text;
}

}  // namespace flexpipe
