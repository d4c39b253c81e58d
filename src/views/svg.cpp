// The SVG timeline: one bar per device with a box per compute action, transfers between the bars,
// and each device's memory curve under its bar.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/views/views.h"
#include "view_common.h"

namespace flexpipe {

namespace {

// Layout, in SVG pixels.
constexpr double kMarginLeft = 76;
constexpr double kMarginRight = 24;
constexpr double kTitleHeight = 22;
constexpr double kLegendHeight = 28;
constexpr double kBarHeight = 22;
constexpr double kLaneHeight = 6;  // host transfers, between a bar and its memory strip
constexpr double kMemoryHeight = 40;
constexpr double kRowGap = 14;
constexpr double kAxisHeight = 36;
constexpr double kPixelsPerStep = 18;  // per shortest compute action, within the width bounds below
constexpr double kMinPlotWidth = 640;
constexpr double kMaxPlotWidth = 12000;
constexpr double kCharWidth = 6.5;  // of the 11 px sans-serif text, to decide whether a label fits

// PyTorch's visualizer colours for F, I, W, B; the rest picked to stay apart from them.
const char* kind_colour(ActionKind kind) {
  switch (kind) {
    case ActionKind::F: return "#4c72b0";
    case ActionKind::I: return "#2a9d8f";
    case ActionKind::W: return "#55a868";
    case ActionKind::B: return "#dd8452";
    case ActionKind::R: return "#8172b3";
    case ActionKind::Opt: return "#8c8c8c";
    default: return "#c44e9a";
  }
}
constexpr std::array<const char*, 4> kCustomColours = {"#c44e9a", "#937860", "#c9a227", "#c0392b"};

const char* custom_colour(int op) { return kCustomColours[op % kCustomColours.size()]; }

// Halfway to white: the device's odd-numbered chunks.
std::string lighter(const char* hex) {
  unsigned r = 0, g = 0, b = 0;
  std::sscanf(hex, "#%02x%02x%02x", &r, &g, &b);
  auto mix = [](unsigned c) { return c + (255 - c) / 2; };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(r), mix(g), mix(b));
}

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string css_class(const Schedule& schedule, const Action& action) {
  if (action.kind == ActionKind::Custom && action.custom < schedule.custom_ops.size())
    return "custom-" + schedule.custom_ops[action.custom].name;
  return std::string(kind_name(action.kind));
}

std::string box_text(const Schedule& schedule, const Action& action) {
  if (action.kind == ActionKind::Overlap) return fmt::format("{}/{}", action.microbatch, action.microbatch2);
  if (action.microbatch >= 0) return std::to_string(action.microbatch);
  if (action.kind == ActionKind::Custom && action.custom < schedule.custom_ops.size())
    return schedule.custom_ops[action.custom].name;
  return std::string(kind_name(action.kind));
}

// 1, 2 or 5 times a power of ten, giving about ten ticks.
double tick_spacing(double span) {
  const double raw = span / 10;
  if (!std::isnormal(raw) || raw < 0) return span > 0 ? span : 1;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0})
    if (factor * magnitude >= raw) return factor * magnitude;
  return 10 * magnitude;
}

struct LegendItem {
  std::string paint;
  std::string label;
  std::string line;  // "": a swatch; "solid" or "dashed": a line sample
};

class SvgWriter {
 public:
  SvgWriter(const Schedule& schedule, const SimResult& result, const TimelineStyle& style)
      : schedule_(schedule), result_(result), style_(style) {
    chunks_ = views::chunk_on_device(schedule);
    for (int c : chunks_) max_chunks_ = std::max(max_chunks_, c + 1);
    for (const DeviceReport& device : result.devices) {
      if (!device.memory.empty()) has_memory_ = true;
      memory_scale_ = std::max(memory_scale_, device.peak_memory);
      for (const MemorySample& sample : device.memory) memory_scale_ = std::max(memory_scale_, sample.bytes);
      if (std::isfinite(device.capacity)) has_capacity_ = true;
    }
    const double span = result.makespan > 0 ? result.makespan : 1;
    const double shortest = views::shortest_compute_duration(schedule, result);
    const double steps = shortest > 0 ? span / shortest : 1;
    plan_legend();
    row_height_ = kBarHeight + kLaneHeight + (has_memory_ ? kMemoryHeight : 0) + kRowGap;
    rows_top_ = kTitleHeight + kLegendHeight;
    double widest = kMaxPlotWidth;
    if (style.max_aspect > 0)
      widest = std::max(kMinPlotWidth, style.max_aspect * height() - kMarginLeft - kMarginRight);
    plot_width_ = std::max(std::clamp(steps * kPixelsPerStep, kMinPlotWidth, widest), legend_width());
    scale_ = plot_width_ / span;
  }

  std::string write() {
    const double width = kMarginLeft + plot_width_ + kMarginRight;
    const double height = this->height();
    out_.reserve(256 * static_cast<size_t>(schedule_.num_actions()) + 4096);
    put("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {0:.0f} {1:.0f}\" width=\"{0:.0f}\" "
        "height=\"{1:.0f}\" font-family=\"sans-serif\" font-size=\"11\">\n",
        width, height);
    write_defs();
    put("<rect class=\"background\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n");
    put("<text x=\"{}\" y=\"15\" font-size=\"13\" font-weight=\"bold\">{}: makespan {}, bubble {:.1f}%, "
        "efficiency {:.1f}%</text>\n",
        kMarginLeft, escape(schedule_.name), escape(with_unit(result_.makespan)), 100 * result_.bubble_ratio,
        100 * result_.efficiency);
    write_legend();
    for (int d = 0; d < schedule_.num_devices; ++d)
      put("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">device {}</text>\n", kMarginLeft - 8,
          bar_top(d) + kBarHeight / 2 + 4, d);
    write_transfers();
    for (int d = 0; d < schedule_.num_devices; ++d) write_boxes(d);
    if (has_memory_)
      for (int d = 0; d < schedule_.num_devices; ++d) write_memory(d);
    write_axis();
    put("</svg>\n");
    return std::move(out_);
  }

 private:
  template <typename... Args>
  void put(fmt::format_string<Args...> format, Args&&... args) {
    fmt::format_to(std::back_inserter(out_), format, std::forward<Args>(args)...);
  }

  double x(double time) const { return kMarginLeft + time * scale_; }
  double bar_top(int device) const { return rows_top_ + row_height_ * device; }
  double memory_top(int device) const { return bar_top(device) + kBarHeight + kLaneHeight; }
  double memory_y(int device, double bytes) const {
    const double fraction = memory_scale_ > 0 ? std::min(bytes / memory_scale_, 1.0) : 0;
    return memory_top(device) + kMemoryHeight - 4 - fraction * (kMemoryHeight - 8);
  }

  std::string fill(const Action& action, bool light) const {
    if (action.kind == ActionKind::Overlap)
      return fmt::format("url(#overlap-{}-{})", action.sub_kind == ActionKind::I ? "I" : "B", light ? 1 : 0);
    const char* base = action.kind == ActionKind::Custom ? custom_colour(action.custom) : kind_colour(action.kind);
    return light ? lighter(base) : std::string(base);
  }

  void write_defs() {
    put("<defs>\n");
    for (ActionKind backward : {ActionKind::B, ActionKind::I})
      for (int light = 0; light < 2; ++light) {
        const char* f = kind_colour(ActionKind::F);
        const char* b = kind_colour(backward);
        put("<linearGradient id=\"overlap-{}-{}\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"1\"><stop offset=\"0.5\" "
            "stop-color=\"{}\"/><stop offset=\"0.5\" stop-color=\"{}\"/></linearGradient>\n",
            kind_name(backward), light, light ? lighter(f) : f, light ? lighter(b) : b);
      }
    put("</defs>\n");
  }

  // Swatches for the kinds that occur, then the line styles; measured before the width is chosen.
  void plan_legend() {
    bool kinds[kNumActionKinds] = {};
    std::vector<bool> customs(schedule_.custom_ops.size(), false);
    ActionKind overlap_backward = ActionKind::B;
    for (const auto& actions : schedule_.device_actions)
      for (const Action& a : actions) {
        if (!views::on_compute_stream(schedule_, a)) continue;
        kinds[static_cast<int>(a.kind)] = true;
        if (a.kind == ActionKind::Custom && a.custom < customs.size()) customs[a.custom] = true;
        if (a.kind == ActionKind::Overlap) overlap_backward = a.sub_kind;
      }
    static constexpr struct {
      ActionKind kind;
      const char* label;
    } kEntries[] = {{ActionKind::F, "F forward"},      {ActionKind::B, "B backward"},
                    {ActionKind::I, "I input grad"},   {ActionKind::W, "W weight grad"},
                    {ActionKind::R, "R recompute"},    {ActionKind::Overlap, "F&B overlapped"},
                    {ActionKind::Opt, "OPT optimizer"}};
    for (const auto& entry : kEntries) {
      if (!kinds[static_cast<int>(entry.kind)]) continue;
      const std::string paint = entry.kind == ActionKind::Overlap
                                    ? fmt::format("url(#overlap-{}-0)", kind_name(overlap_backward))
                                    : std::string(kind_colour(entry.kind));
      legend_.push_back({paint, entry.label, ""});
    }
    for (size_t op = 0; op < customs.size(); ++op)
      if (customs[op]) legend_.push_back({custom_colour(static_cast<int>(op)), schedule_.custom_ops[op].name, ""});
    const std::string light = lighter(kind_colour(ActionKind::F));
    if (max_chunks_ == 2) legend_.push_back({light, "second chunk on the device", ""});
    if (max_chunks_ > 2) legend_.push_back({light, "odd chunks (1, 3, ...) on the device", ""});
    if (!result_.transfers.empty()) legend_.push_back({"#555555", "transfer", "solid"});
    if (has_memory_) legend_.push_back({"#333333", "memory", "solid"});
    if (has_memory_ && has_capacity_) legend_.push_back({"#c0392b", "capacity", "dashed"});
  }

  static double legend_item_width(const LegendItem& item) { return 18 + kCharWidth * item.label.size() + 14; }

  double legend_width() const {
    double width = 0;
    for (const LegendItem& item : legend_) width += legend_item_width(item);
    return width;
  }

  void write_legend() {
    double at = kMarginLeft;
    const double y = kTitleHeight + 6;
    for (const LegendItem& item : legend_) {
      if (item.line.empty())
        put("<rect class=\"swatch\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>", at, y,
            item.paint);
      else
        put("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\"{4}/>", at, y + 6, at + 14,
            item.paint, item.line == "dashed" ? " stroke-dasharray=\"4 3\"" : "");
      put("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", at + 18, y + 10, escape(item.label));
      at += legend_item_width(item);
    }
  }

  void write_transfers() {
    const int devices = schedule_.num_devices;
    for (const Transfer& t : result_.transfers) {
      const bool src_ok = t.src >= 0 && t.src < devices;
      const bool dst_ok = t.dst >= 0 && t.dst < devices;
      if (src_ok && dst_ok) {
        put("<line class=\"transfer\" x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"#555555\" "
            "stroke-opacity=\"0.6\"/>\n",
            x(t.time.start), bar_top(t.src) + kBarHeight / 2, x(t.time.end), bar_top(t.dst) + kBarHeight / 2);
      } else if (src_ok || dst_ok) {  // to or from the host: a mark under the device's bar
        const double y = bar_top(src_ok ? t.src : t.dst) + kBarHeight + kLaneHeight / 2;
        put("<line class=\"host-transfer\" x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" "
            "stroke=\"#937860\" stroke-width=\"3\"/>\n",
            x(t.time.start), y, std::max(x(t.time.end), x(t.time.start) + 1), y);
      }
    }
  }

  void write_boxes(int device) {
    const auto& actions = schedule_.device_actions[device];
    const double top = bar_top(device);
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      if (!views::on_compute_stream(schedule_, a)) continue;
      const Interval& t = result_.timeline[device][i];
      const double width = (t.end - t.start) * scale_;
      if (!(width > 0)) continue;
      const bool light = views::chunk_of(chunks_, a.stage) % 2 == 1;
      put("<rect class=\"{}\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" stroke=\"#ffffff\" "
          "stroke-width=\"0.5\"><title>{} [{}, {})</title></rect>\n",
          escape(css_class(schedule_, a)), x(t.start), top, width, kBarHeight, fill(a, light),
          escape(schedule_.action_name(a)), views::format_number(t.start), views::format_number(t.end));
      const std::string text = box_text(schedule_, a);
      if (kCharWidth * text.size() + 2 <= width)
        put("<text x=\"{:.2f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"{}\">{}</text>\n", x(t.start) + width / 2,
            top + kBarHeight / 2 + 4, light ? "#222222" : "#ffffff", escape(text));
    }
  }

  void write_memory(int device) {
    const DeviceReport& report = result_.devices[device];
    const double top = memory_top(device);
    const double left = x(0), right = x(result_.makespan);
    put("<line class=\"memory-axis\" x1=\"{0:.2f}\" y1=\"{1:.1f}\" x2=\"{2:.2f}\" y2=\"{1:.1f}\" "
        "stroke=\"#cccccc\"/>\n",
        left, memory_y(device, 0), right);
    if (report.memory.empty()) return;
    // A step function: hold each level until the next sample, then jump.
    put("<polyline class=\"memory\" fill=\"none\" stroke=\"#333333\" stroke-width=\"1.2\" points=\"");
    double level = report.memory.front().bytes;
    put("{:.2f},{:.1f}", x(report.memory.front().time), memory_y(device, level));
    for (size_t i = 1; i < report.memory.size(); ++i) {
      const MemorySample& sample = report.memory[i];
      put(" {0:.2f},{1:.1f} {0:.2f},{2:.1f}", x(sample.time), memory_y(device, level), memory_y(device, sample.bytes));
      level = sample.bytes;
    }
    put(" {:.2f},{:.1f}\"/>\n", std::max(right, x(report.memory.back().time)), memory_y(device, level));
    if (std::isfinite(report.capacity)) {
      const double y = std::max(top, memory_y(device, report.capacity));
      put("<line class=\"capacity\" x1=\"{0:.2f}\" y1=\"{1:.1f}\" x2=\"{2:.2f}\" y2=\"{1:.1f}\" stroke=\"#c0392b\" "
          "stroke-dasharray=\"4 3\"/><text x=\"{2:.2f}\" y=\"{3:.1f}\" text-anchor=\"end\" font-size=\"9\" "
          "fill=\"#c0392b\">capacity {4}</text>\n",
          left, y, right, y - 2, views::format_number(report.capacity));
    }
    const double peak_x = x(report.peak_time);
    const bool right_half = peak_x > left + plot_width_ / 2;
    put("<text class=\"peak\" x=\"{:.2f}\" y=\"{:.1f}\" text-anchor=\"{}\" font-size=\"9\">peak {}</text>\n",
        right_half ? peak_x - 2 : peak_x + 2, std::max(top + 8, memory_y(device, report.peak_memory) - 2),
        right_half ? "end" : "start", views::format_number(report.peak_memory));
    put("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" font-size=\"9\" fill=\"#666666\">memory</text>\n",
        kMarginLeft - 8, top + kMemoryHeight / 2 + 3);
  }

  void write_axis() {
    const double y = rows_top_ + row_height_ * schedule_.num_devices + 4;
    const double end = std::max(result_.makespan, 0.0);
    put("<line class=\"axis\" x1=\"{0:.2f}\" y1=\"{1:.1f}\" x2=\"{2:.2f}\" y2=\"{1:.1f}\" stroke=\"#000000\"/>\n", x(0),
        y, x(end));
    const double spacing = tick_spacing(end);
    for (int64_t k = 0; k * spacing <= end * (1 + 1e-12); ++k) {
      const double at = x(k * spacing);
      put("<line x1=\"{0:.2f}\" y1=\"{1:.1f}\" x2=\"{0:.2f}\" y2=\"{2:.1f}\" stroke=\"#000000\"/><text x=\"{0:.2f}\" "
          "y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
          at, y, y + 4, y + 16, views::format_number(k * spacing));
    }
    put("<text x=\"{:.2f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", x(end), y + 30,
        style_.time_unit == "unit" ? std::string("time") : fmt::format("time ({})", escape(style_.time_unit)));
  }

  double height() const { return rows_top_ + row_height_ * schedule_.num_devices + kAxisHeight; }
  std::string with_unit(double time) const {
    return views::format_number(time) + (style_.time_unit == "unit" ? "" : " " + style_.time_unit);
  }

  const Schedule& schedule_;
  const SimResult& result_;
  const TimelineStyle& style_;
  std::vector<int> chunks_;
  std::vector<LegendItem> legend_;
  int max_chunks_ = 1;
  bool has_memory_ = false;
  bool has_capacity_ = false;
  double memory_scale_ = 0;
  double plot_width_ = kMinPlotWidth;
  double scale_ = 1;
  double row_height_ = 0;
  double rows_top_ = 0;
  std::string out_;
};

}  // namespace

std::string render_svg(const Schedule& schedule, const SimResult& result, const TimelineStyle& style) {
  views::require_timeline(schedule, result, "svg");
  views::require_device_reports(schedule, result, "svg");
  return SvgWriter(schedule, result, style).write();
}

}  // namespace flexpipe
