// The interpreter: runs a checked program, emitting actions and their source locations.
#include "interpreter.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "checker.h"
#include "flexpipe/support/error.h"
#include "greedy.h"

namespace flexpipe::lang {

namespace {

// Upper bounds that keep a hostile or mistyped program from allocating the machine away: the IR's
// kMaxDevices, kMaxStages and kMaxMicrobatches.

[[noreturn]] void fail(SourceLocation at, std::string message, std::string hint = {}) {
  throw RunError{at, std::move(message), std::move(hint)};
}

int64_t checked(bool overflow, int64_t value, const Expr& e) {
  if (overflow) fail(e.location, "integer overflow", "values are 64-bit integers");
  return value;
}

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// The largest array a program may make, in elements (each one also counts as a step).
constexpr int64_t kMaxArrayElements = int64_t{1} << 26;
// Patterns do not recurse, but each may call the one declared before it: every call is a level of the
// interpreter's recursion, and 30 thousand such calls overflowed the stack. Blocks nest at most 64 deep
// in one pattern, so calls that each open many are bounded by the blocks open at once too.
constexpr int kMaxCallDepth = 256;
constexpr int kMaxOpenBlocks = 1024;

using Arrays = std::vector<std::vector<int64_t>>;  // per slot: the array a slot holds, if any

// Evaluates expressions over a frame of slots; `count` and `device` ask the state, arrays the
// frame's arrays, when there are any.
class Evaluator {
 public:
  struct State {
    virtual ~State() = default;
    virtual int64_t count(int family, int64_t stage, const Expr& at) = 0;
    virtual int64_t device(int64_t stage, const Expr& at) = 0;
  };

  Evaluator(std::vector<int64_t>& slots, State* state, Arrays* arrays = nullptr)
      : slots_(slots), state_(state), arrays_(arrays) {}

  // The element `index` of the array in `slot`, checked against its size.
  int64_t& element(int slot, int64_t index, const std::string& name, const Expr& at) {
    if (arrays_ == nullptr) fail(at.location, "arrays are not available in a parameter");
    std::vector<int64_t>& array = (*arrays_)[slot];
    if (index < 0 || index >= static_cast<int64_t>(array.size()))
      fail(at.start,
           fmt::format("index {} is out of range: '{}' has {} element{}{}", index, name, array.size(),
                       array.size() == 1 ? "" : "s", array.empty() ? "" : fmt::format(" (0..{})", array.size() - 1)));
    return array[index];
  }

  int64_t eval(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Integer: return e.integer;
      case ExprKind::Variable: return slots_[e.slot];
      case ExprKind::Index: return element(e.slot, eval(*e.args[0]), e.name, *e.args[0]);
      case ExprKind::Unary: {
        const int64_t v = eval(*e.args[0]);
        if (e.op == Op::Not) return v == 0;
        return checked(v == std::numeric_limits<int64_t>::min(), -v, e);
      }
      case ExprKind::Binary: return binary(e);
      case ExprKind::Conditional: return eval(*e.args[0]) != 0 ? eval(*e.args[1]) : eval(*e.args[2]);
      case ExprKind::Call: return call(e);
      case ExprKind::Real:
      case ExprKind::List: break;
    }
    fail(e.location, "not an integer expression");
  }

  double eval_real(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Real: return e.real;
      case ExprKind::Unary:
        if (e.op == Op::Neg) return -eval_real(*e.args[0]);
        break;
      case ExprKind::Binary: {
        if (e.op != Op::Add && e.op != Op::Sub && e.op != Op::Mul && e.op != Op::Div) break;
        const double a = eval_real(*e.args[0]), b = eval_real(*e.args[1]);
        if (e.op == Op::Add) return a + b;
        if (e.op == Op::Sub) return a - b;
        if (e.op == Op::Mul) return a * b;
        if (b == 0) fail(e.location, "division by zero");
        return a / b;
      }
      default: break;
    }
    return static_cast<double>(eval(e));
  }

 private:
  int64_t binary(const Expr& e) {
    if (e.op == Op::And) return eval(*e.args[0]) != 0 && eval(*e.args[1]) != 0;
    if (e.op == Op::Or) return eval(*e.args[0]) != 0 || eval(*e.args[1]) != 0;
    const int64_t a = eval(*e.args[0]), b = eval(*e.args[1]);
    int64_t r = 0;
    switch (e.op) {
      case Op::Add: {
        const bool overflow = __builtin_add_overflow(a, b, &r);
        return checked(overflow, r, e);
      }
      case Op::Sub: {
        const bool overflow = __builtin_sub_overflow(a, b, &r);
        return checked(overflow, r, e);
      }
      case Op::Mul: {
        const bool overflow = __builtin_mul_overflow(a, b, &r);
        return checked(overflow, r, e);
      }
      case Op::Div:
      case Op::Mod:
        if (b == 0) fail(e.location, e.op == Op::Div ? "division by zero" : "remainder by zero");
        if (a == std::numeric_limits<int64_t>::min() && b == -1) fail(e.location, "integer overflow");
        return e.op == Op::Div ? floor_div(a, b) : a - floor_div(a, b) * b;
      case Op::Eq: return a == b;
      case Op::Ne: return a != b;
      case Op::Lt: return a < b;
      case Op::Le: return a <= b;
      case Op::Gt: return a > b;
      case Op::Ge: return a >= b;
      default: break;
    }
    fail(e.location, "bad operator");
  }

  int64_t call(const Expr& e) {
    switch (e.builtin) {
      case Builtin::Min:
      case Builtin::Max: {
        int64_t r = eval(*e.args[0]);
        for (size_t i = 1; i < e.args.size(); ++i) {
          const int64_t v = eval(*e.args[i]);
          r = e.builtin == Builtin::Min ? std::min(r, v) : std::max(r, v);
        }
        return r;
      }
      case Builtin::Abs: {
        const int64_t v = eval(*e.args[0]);
        return checked(v == std::numeric_limits<int64_t>::min(), v < 0 ? -v : v, e);
      }
      case Builtin::Device:
        if (state_ == nullptr) fail(e.location, "device(s) is not available in a parameter");
        return state_->device(eval(*e.args[0]), e);
      case Builtin::Count:
        if (state_ == nullptr) fail(e.location, "count(K, s) is not available in a parameter");
        return state_->count(e.counter, eval(*e.args[1]), e);
      case Builtin::Array:
      case Builtin::None: break;
    }
    fail(e.location, "unknown function");
  }

  std::vector<int64_t>& slots_;
  State* state_;
  Arrays* arrays_;
};

const char* kind_text(const ActionForm& form) { return form.kind_name.c_str(); }

class Interpreter final : public Evaluator::State {
 public:
  Interpreter(const Program& program, const SourceText& source, const CompileOptions& options)
      : program_(program), source_(source), options_(options), eval_(slots_, this, &arrays_) {}

  void run(const ParameterValues& parameters, CompiledProgram& out) {
    slots_ = parameters.slots;
    arrays_.assign(slots_.size(), {});
    out_ = &out;
    out.map.origin = source_.origin();
    out.map.lines = source_.lines();
    const Stmt* greedy = nullptr;
    for (const StmtPtr& stmt : program_.statements) {
      if (stmt->kind == StmtKind::Param) continue;
      if (stmt->kind == StmtKind::Greedy) greedy = stmt.get();
      execute(*stmt);
    }
    materialize(program_.statements.empty() ? SourceLocation{1, 1} : program_.statements.back()->location);
    if (greedy != nullptr) run_greedy(*greedy);
    Schedule& s = out.schedule;
    s.custom_ops = ops_;
    if (!named_) name_ = std::filesystem::path(source_.origin()).stem().string();
    s.name = name_;
  }

  // ---- Evaluator::State ---------------------------------------------------------------------------
  int64_t count(int family, int64_t stage, const Expr& at) override {
    require_schedule(at.location);
    check_stage(stage, at.location);
    return counts_[family_index(family, static_cast<int>(stage))];
  }
  int64_t device(int64_t stage, const Expr& at) override {
    if (placement_.empty()) fail(at.location, "device(s) needs the stages declared first");
    check_stage(stage, at.location);
    return placement_[stage];
  }

 private:
  void tick(SourceLocation at, int64_t steps = 1) {
    if ((steps_ += steps) > options_.max_steps)
      fail(at, fmt::format("step limit of {} reached: the program runs away", options_.max_steps),
           "a `while` whose condition never turns false? (CompileOptions::max_steps raises the limit)");
  }

  void check_stage(int64_t stage, SourceLocation at) const {
    if (stage < 0 || stage >= num_stages_)
      fail(at, fmt::format("stage {} is out of range: the program has {} stages (0..{})", stage, num_stages_,
                           num_stages_ - 1));
  }

  // ---- statements -------------------------------------------------------------------------------
  void block(const Block& body) {
    ++open_blocks_;
    for (const StmtPtr& stmt : body) execute(*stmt);
    --open_blocks_;
  }

  void execute(const Stmt& s) {
    tick(s.location);
    switch (s.kind) {
      case StmtKind::Param:
      case StmtKind::Pattern:
      case StmtKind::Greedy: return;
      case StmtKind::Name:
        name_ = s.name;
        named_ = true;
        return;
      case StmtKind::Description: out_->description = s.name; return;
      case StmtKind::Devices: devices(s); return;
      case StmtKind::Microbatches: microbatches(s); return;
      case StmtKind::Stages: stages(s); return;
      case StmtKind::Pipelines: pipelines(s); return;
      case StmtKind::Op: op(s); return;
      case StmtKind::Let:
      case StmtKind::Assign: {
        if (s.array != ArrayForm::None) {
          set_array(s);
          return;
        }
        const int64_t v = eval_.eval(*s.exprs[0]);
        int64_t& slot = s.index ? eval_.element(s.slot, eval_.eval(*s.index), s.name, *s.index) : slots_[s.slot];
        if (s.assign_op == Op::Add) {
          if (__builtin_add_overflow(slot, v, &slot)) fail(s.location, "integer overflow");
        } else if (s.assign_op == Op::Sub) {
          if (__builtin_sub_overflow(slot, v, &slot)) fail(s.location, "integer overflow");
        } else {
          slot = v;
        }
        return;
      }
      case StmtKind::For: {
        const int64_t from = eval_.eval(*s.exprs[0]), to = eval_.eval(*s.exprs[1]);
        for (int64_t k = 0; k < to - from && from < to; ++k) {
          tick(s.location);
          slots_[s.slot] = s.reversed ? to - 1 - k : from + k;
          block(s.body);
        }
        return;
      }
      case StmtKind::Repeat: {
        const int64_t n = eval_.eval(*s.exprs[0]);
        for (int64_t k = 0; k < n; ++k) {
          tick(s.location);
          block(s.body);
        }
        return;
      }
      case StmtKind::While:
        while (eval_.eval(*s.exprs[0]) != 0) {
          tick(s.location);
          block(s.body);
        }
        return;
      case StmtKind::If: block(eval_.eval(*s.exprs[0]) != 0 ? s.body : s.else_body); return;
      case StmtKind::On: {
        const int64_t d = eval_.eval(*s.exprs[0]);
        require_schedule(s.location);
        if (d < 0 || d >= num_devices_)
          fail(s.exprs[0]->start, fmt::format("device {} is out of range: the program has {} devices (0..{})", d,
                                              num_devices_, num_devices_ - 1));
        const int saved = current_device_;
        current_device_ = static_cast<int>(d);
        block(s.body);
        current_device_ = saved;
        return;
      }
      case StmtKind::Call: {
        const Stmt& pattern = *s.pattern;
        const auto& args = s.actions[0].args;
        // Evaluate every argument before binding any: an argument may read a parameter slot.
        std::vector<int64_t> values;
        values.reserve(args.size());
        for (const ExprPtr& arg : args) values.push_back(eval_.eval(*arg));
        for (size_t i = 0; i < values.size(); ++i) slots_[pattern.parameter_slots[i]] = values[i];
        if (++call_depth_ > kMaxCallDepth)
          fail(s.location, fmt::format("patterns call patterns more than {} deep", kMaxCallDepth),
               "call the inner patterns side by side, not each from the one after it");
        if (open_blocks_ >= kMaxOpenBlocks)
          fail(s.location, fmt::format("pattern calls open more than {} blocks at once", kMaxOpenBlocks),
               "call the inner patterns side by side, or nest fewer blocks around each call");
        block(pattern.body);
        --call_depth_;
        return;
      }
      case StmtKind::Action: emit(s); return;
    }
  }

  // `let a = array(n[, v])`, `a = array(...)`, `let b = a`, `b = a`: every element counts as a step.
  void set_array(const Stmt& s) {
    const Expr& value = *s.exprs[0];
    if (s.array == ArrayForm::Copy) {
      std::vector<int64_t> copy = arrays_[value.slot];
      tick(s.location, static_cast<int64_t>(copy.size()));
      arrays_[s.slot] = std::move(copy);
      return;
    }
    const int64_t size = eval_.eval(*value.args[0]);
    if (size < 0 || size > kMaxArrayElements)
      fail(value.args[0]->start, fmt::format("an array has 0 to {} elements (got {})", kMaxArrayElements, size));
    const int64_t fill = value.args.size() > 1 ? eval_.eval(*value.args[1]) : 0;
    tick(s.location, size);
    arrays_[s.slot].assign(static_cast<size_t>(size), fill);
  }

  void declared_late(const Stmt& s, const char* what) {
    if (materialized_)
      fail(s.location, fmt::format("'{}' comes after the first action", what),
           "declare devices, microbatches, stages, pipelines and ops before any action");
  }

  int64_t bounded(const Expr& e, int64_t low, int64_t high, const char* what) {
    const int64_t v = eval_.eval(e);
    if (v < low || v > high) fail(e.start, fmt::format("{} must be between {} and {} (got {})", what, low, high, v));
    return v;
  }

  void devices(const Stmt& s) {
    declared_late(s, "devices");
    num_devices_ = static_cast<int>(bounded(*s.exprs[0], 1, kMaxDevices, "the number of devices"));
  }

  void microbatches(const Stmt& s) {
    declared_late(s, "microbatches");
    num_microbatches_ = static_cast<int>(bounded(*s.exprs[0], 1, kMaxMicrobatches, "the number of micro-batches"));
    padded_ = num_microbatches_;
    if (s.exprs.size() > 1)
      padded_ = static_cast<int>(
          bounded(*s.exprs[1], num_microbatches_, kMaxMicrobatches, "the padded number of micro-batches"));
  }

  void stages(const Stmt& s) {
    declared_late(s, "stages");
    if (num_devices_ == 0) fail(s.location, "'stages' needs the devices declared first", "write `devices N` above it");
    num_stages_ = static_cast<int>(bounded(*s.exprs[0], 1, kMaxStages, "the number of stages"));
    switch (s.placement) {
      case PlacementForm::Loop: placement_ = loop_placement(num_devices_, num_stages_); return;
      case PlacementForm::VShape: placement_ = v_placement(num_devices_, num_stages_); return;
      case PlacementForm::List: {
        const Expr& list = *s.exprs[1];
        if (static_cast<int64_t>(list.args.size()) != num_stages_)
          fail(list.location,
               fmt::format("the placement lists {} devices for {} stages", list.args.size(), num_stages_));
        placement_.clear();
        for (const ExprPtr& e : list.args) placement_.push_back(static_cast<int32_t>(device_value(*e)));
        return;
      }
      case PlacementForm::Expression:
        placement_.assign(num_stages_, 0);
        for (int st = 0; st < num_stages_; ++st) {
          tick(s.location);
          slots_[s.slot] = st;
          placement_[st] = static_cast<int32_t>(device_value(*s.exprs[1]));
        }
        return;
    }
  }

  int64_t device_value(const Expr& e) {
    const int64_t d = eval_.eval(e);
    if (d < 0 || d >= num_devices_)
      fail(e.start, fmt::format("device {} is out of range: the program has {} devices (0..{})", d, num_devices_,
                                num_devices_ - 1));
    return d;
  }

  void pipelines(const Stmt& s) {
    declared_late(s, "pipelines");
    if (num_stages_ == 0 || num_microbatches_ == 0)
      fail(s.location, "'pipelines' needs the microbatches and stages declared first");
    num_pipelines_ = static_cast<int>(bounded(*s.exprs[0], 1, num_stages_, "the number of pipelines"));
    if (num_stages_ % num_pipelines_ != 0)
      fail(s.exprs[0]->start,
           fmt::format("{} stages cannot form {} pipelines of equal length", num_stages_, num_pipelines_));
    if (padded_ != num_microbatches_)
      fail(s.location, "padded micro-batches and several pipelines do not mix", "drop `padded to`");
    const Expr& route = *s.exprs[1];
    route_.assign(num_microbatches_, 0);
    if (route.kind == ExprKind::List && static_cast<int64_t>(route.args.size()) != num_microbatches_)
      fail(route.location,
           fmt::format("the route lists {} pipelines for {} micro-batches", route.args.size(), num_microbatches_));
    for (int mb = 0; mb < num_microbatches_; ++mb) {
      tick(s.location);
      slots_[s.slot] = mb;
      const Expr& e = route.kind == ExprKind::List ? *route.args[mb] : route;
      const int64_t pipeline = eval_.eval(e);
      if (pipeline < 0 || pipeline >= num_pipelines_)
        fail(e.start, fmt::format("micro-batch {} is routed to pipeline {}, but there are {} pipelines (0..{})", mb,
                                  pipeline, num_pipelines_, num_pipelines_ - 1));
      route_[mb] = static_cast<int32_t>(pipeline);
    }
  }

  void op(const Stmt& s) {
    declared_late(s, "op");
    CustomOpKind op;
    op.name = s.name;
    ActionKind kind = ActionKind::F;
    for (const Dependency& d : s.op.after) {
      builtin_kind(d.kind_name, kind);
      op.after.push_back({kind, d.stage_offset, d.all_microbatches});
    }
    for (const Dependency& d : s.op.before) {
      builtin_kind(d.kind_name, kind);
      op.before.push_back({kind, d.stage_offset, d.all_microbatches});
    }
    if (s.op.duration) op.duration = eval_.eval_real(*s.op.duration);
    if (s.op.memory) op.memory = eval_.eval_real(*s.op.memory);
    op.communicates = s.op.communicates;
    op.per_microbatch = !s.op.stagewide;
    ops_.push_back(std::move(op));
  }

  // ---- the schedule -----------------------------------------------------------------------------
  void require_schedule(SourceLocation at) {
    if (!materialized_) materialize(at);
  }

  void materialize(SourceLocation at) {
    if (materialized_) return;
    if (num_devices_ == 0 || num_microbatches_ == 0 || num_stages_ == 0)
      fail(at, "devices, microbatches and stages must be declared before the first action");
    materialized_ = true;
    Schedule& s = out_->schedule;
    s = make_schedule("", num_devices_, num_microbatches_, placement_, num_pipelines_);
    if (!route_.empty()) s.microbatch_pipeline = route_;
    out_->map.device_positions.assign(num_devices_, {});
    const size_t families = kBuiltinCounterFamilies + ops_.size();
    last_.assign(families * num_stages_, -1);
    counts_.assign(families * num_stages_, 0);
    pending_weights_.assign(num_devices_, {});
  }

  size_t family_index(int family, int stage) const { return static_cast<size_t>(family) * num_stages_ + stage; }

  int pipeline_of(int mb) const { return route_.empty() || mb >= num_microbatches_ ? 0 : route_[mb]; }

  // One action form to (stage, micro-batch); advances the counters.
  Action resolve(const ActionForm& form) {
    const auto& args = form.args;
    if (form.kind == ActionKind::W && args.empty()) {
      if (current_device_ < 0)
        fail(form.location, "W() takes the oldest pending weight gradient of a device: it needs a device",
             "write it inside `on d { ... }`, or name the stage: W(s)");
      auto& pending = pending_weights_[current_device_];
      if (pending.empty())
        fail(form.location, fmt::format("W(): no I on device {} is waiting for its W", current_device_));
      const auto [stage, mb] = pending.front();
      pending.pop_front();
      return counted(Action::make(ActionKind::W, stage, mb), form);
    }
    const int64_t stage = eval_.eval(*args[0]);
    check_stage(stage, args[0]->start);
    const int family = counter_family(form.kind, form.custom);
    const bool stagewide = form.kind == ActionKind::Opt || (form.custom >= 0 && !ops_[form.custom].per_microbatch);
    Action a = Action::make(form.kind, static_cast<int>(stage));
    if (form.custom >= 0) a = Action::custom_op(static_cast<uint16_t>(form.custom), static_cast<int>(stage), -1);
    if (stagewide) return counted(a, form);
    if (args.size() == 2) {
      const int64_t mb = eval_.eval(*args[1]);
      if (mb < 0 || mb >= padded_)
        fail(args[1]->start, fmt::format("micro-batch {} is out of range: the program has {} micro-batches (0..{})", mb,
                                         padded_, padded_ - 1));
      a.microbatch = static_cast<int>(mb);
      return counted(a, form);
    }
    const int pipeline = out_->schedule.pipeline_of_stage(static_cast<int>(stage));
    const int mb = next_microbatch(last_[family_index(family, static_cast<int>(stage))], padded_, pipeline,
                                   [&](int m) { return pipeline_of(m); });
    if (mb >= padded_)
      fail(form.location,
           fmt::format("{}({}): every micro-batch of stage {} already has its {}", kind_text(form), stage, stage,
                       form.kind == ActionKind::B || form.kind == ActionKind::I ? "backward" : form.kind_name),
           fmt::format("count({}, {}) is {} here", form.kind_name, stage,
                       counts_[family_index(family, static_cast<int>(stage))]));
    a.microbatch = mb;
    return counted(a, form);
  }

  Action counted(const Action& a, const ActionForm& form) {
    const size_t i = family_index(counter_family(a.kind, form.custom), a.stage);
    ++counts_[i];
    last_[i] = a.microbatch;
    if (a.kind == ActionKind::I) pending_weights_[placement_[a.stage]].push_back({a.stage, a.microbatch});
    return a;
  }

  void emit(const Stmt& s) {
    require_schedule(s.location);
    Action a = resolve(s.actions[0]);
    bool padded = a.microbatch >= num_microbatches_;
    if (s.actions.size() == 2) {
      const Action backward = resolve(s.actions[1]);
      const bool padded_backward = backward.microbatch >= num_microbatches_;
      if (padded || padded_backward)
        fail(s.location, "an overlapped action cannot hold a padded micro-batch",
             fmt::format("micro-batches {} and up are padding", num_microbatches_));
      a = Action::overlap(a.stage, a.microbatch, backward.stage, backward.microbatch, backward.kind);
    }
    const int device = placement_[a.stage];
    if (current_device_ >= 0 && device != current_device_)
      fail(s.location,
           fmt::format("{} runs on device {}, not on device {} of this `on` block", action_text(a), device,
                       current_device_),
           fmt::format("stage {} is placed on device {}", a.stage, device));
    if (padded) return;
    auto& list = out_->schedule.device_actions[device];
    if (options_.trace)
      out_->trace.push_back(fmt::format("{}:{}:{}: {} -> device {} #{}", source_.origin(), s.location.line,
                                        s.location.column, action_text(a), device, list.size()));
    list.push_back(a);
    out_->map.device_positions[device].push_back(s.location);
  }

  std::string action_text(const Action& a) const {
    if (a.kind == ActionKind::Custom) {
      const std::string& name = ops_[a.custom].name;
      return a.microbatch < 0 ? fmt::format("{}{}", a.stage, name) : fmt::format("{}{}{}", a.stage, name, a.microbatch);
    }
    return to_string(a);
  }

  void run_greedy(const Stmt& s) {
    const GreedyDecl& g = s.greedy;
    GreedyPolicy policy;
    policy.time.fill(1);
    for (const std::string& k : g.prefer) {
      if (g.written) break;
      ActionKind kind;
      builtin_kind(k, kind);
      policy.prefer.push_back(kind);
    }
    for (const std::string& k : g.cooldown) {
      ActionKind kind;
      builtin_kind(k, kind);
      policy.cooldown.push_back(kind);
    }
    for (size_t i = 0; i < g.time.size(); ++i) {
      ActionKind kind;
      builtin_kind(g.time[i].first, kind);
      policy.time[static_cast<int>(kind)] = bounded(*g.time[i].second, 1, 1'000'000, "a greedy time");
    }
    policy.inflight.assign(num_devices_, -1);
    if (g.inflight)
      for (int d = 0; d < num_devices_; ++d) {
        slots_[g.device_slot] = d;
        policy.inflight[d] = eval_.eval(*g.inflight);
      }
    if (padded_ != num_microbatches_) fail(s.location, "a greedy policy does not use padded micro-batches");
    // Each of the stages x micro-batches forwards takes a step: refuse before allocating for them.
    if (static_cast<int64_t>(num_stages_) * num_microbatches_ > options_.max_steps - steps_)
      fail(s.location, fmt::format("a greedy policy over {} stages and {} micro-batches exceeds the step limit of {}",
                                   num_stages_, num_microbatches_, options_.max_steps));
    if (g.written) check_written_lists(s);
    std::vector<std::vector<int>> written_positions;
    try {
      written_positions = schedule_greedy(out_->schedule, policy, options_.max_steps - steps_);
    } catch (const Error& e) {
      fail(s.location, e.what());
    }
    for (int d = 0; d < num_devices_; ++d) {
      std::vector<SourceLocation>& at = out_->map.device_positions[d];
      if (!g.written) {
        at.assign(out_->schedule.device_actions[d].size(), s.location);
        continue;
      }
      std::vector<SourceLocation> reordered;
      reordered.reserve(at.size());
      for (int position : written_positions[d]) reordered.push_back(at[position]);
      at = std::move(reordered);
    }
  }

  // `prefer written` reorders the lists, so they must hold exactly what the scheduler runs: one F
  // and one backward (B, or I and W) of every stage and micro-batch of its pipeline.
  void check_written_lists(const Stmt& greedy) const {
    const Schedule& schedule = out_->schedule;
    constexpr ActionKind kinds[] = {ActionKind::F, ActionKind::B, ActionKind::I, ActionKind::W};
    std::vector<uint8_t> seen(static_cast<size_t>(num_stages_) * num_microbatches_ * 4, 0);
    auto seen_at = [&](int kind, int stage, int mb) -> uint8_t& {
      return seen[(static_cast<size_t>(stage) * num_microbatches_ + mb) * 4 + kind];
    };
    const Action* split = nullptr;  // the first I or W: then no B may be written
    const Action* whole = nullptr;  // the first B
    for (int d = 0; d < num_devices_; ++d)
      for (size_t j = 0; j < schedule.device_actions[d].size(); ++j) {
        const Action& a = schedule.device_actions[d][j];
        const SourceLocation at = out_->map.device_positions[d][j];
        const auto kind = std::find(std::begin(kinds), std::end(kinds), a.kind);
        if (kind == std::end(kinds))
          fail(at, fmt::format("`prefer written` runs F, B, I and W, not {}", action_text(a)),
               fmt::format("the greedy policy at {}:{} reorders this list", greedy.location.line,
                           greedy.location.column));
        if (a.kind == ActionKind::B && whole == nullptr) whole = &a;
        if ((a.kind == ActionKind::I || a.kind == ActionKind::W) && split == nullptr) split = &a;
        if (a.kind != ActionKind::F && whole != nullptr && split != nullptr)
          fail(at, fmt::format("whole and split backwards mixed: {} and {}", action_text(*whole), action_text(*split)),
               "`prefer written` runs B for every backward, or I and W for every one");
        if (seen_at(static_cast<int>(kind - std::begin(kinds)), a.stage, a.microbatch)++ > 0)
          fail(at, fmt::format("{} is written twice: `prefer written` runs each action once", action_text(a)));
      }
    for (int stage = 0; stage < num_stages_; ++stage)
      for (int mb = 0; mb < num_microbatches_; ++mb) {
        if (schedule.pipeline_of_microbatch(mb) != schedule.pipeline_of_stage(stage)) continue;
        for (int k = 0; k < 4; ++k) {
          const bool needed = k == 0 || (split != nullptr ? k >= 2 : k == 1);
          if (needed && seen_at(k, stage, mb) == 0)
            fail(greedy.location,
                 fmt::format("`prefer written` needs every F and backward, but no list holds {}",
                             action_text(Action::make(kinds[k], stage, mb))),
                 fmt::format("write it on device {}", placement_[stage]));
        }
      }
  }

  const Program& program_;
  const SourceText& source_;
  const CompileOptions& options_;
  std::vector<int64_t> slots_;
  Arrays arrays_;  // per slot: the array of a slot that holds one
  Evaluator eval_;
  CompiledProgram* out_ = nullptr;
  int64_t steps_ = 0;
  std::string name_;
  bool named_ = false;
  int num_devices_ = 0, num_microbatches_ = 0, padded_ = 0, num_stages_ = 0, num_pipelines_ = 1;
  std::vector<int32_t> placement_, route_;
  std::vector<CustomOpKind> ops_;
  bool materialized_ = false;
  std::vector<int32_t> last_;    // per (counter family, stage): last micro-batch emitted, -1 none
  std::vector<int64_t> counts_;  // per (counter family, stage): actions emitted
  std::vector<std::deque<std::pair<int, int>>> pending_weights_;  // per device: I's whose W() has not run
  int current_device_ = -1;
  int call_depth_ = 0;
  int open_blocks_ = 0;
};

}  // namespace

int64_t evaluate_constant(const Expr& expr, std::vector<int64_t>& slots) {
  return Evaluator(slots, nullptr).eval(expr);
}

std::string where_message(const Where& where, std::vector<int64_t>& slots) {
  std::string message = where.text.front();
  for (size_t i = 0; i < where.shown.size(); ++i)
    message += std::to_string(evaluate_constant(*where.shown[i], slots)) + where.text[i + 1];
  return message;
}

ParameterValues evaluate_parameters(const Program& program, const std::map<std::string, int64_t>& defines,
                                    std::vector<LangDiagnostic>& diagnostics) {
  ParameterValues out;
  out.slots.assign(program.num_slots, 0);
  std::string names;
  for (const StmtPtr& s : program.statements)
    if (s->kind == StmtKind::Param) names += (names.empty() ? "" : ", ") + s->name;
  for (const auto& [name, value] : defines) {
    bool known = false;
    for (const StmtPtr& s : program.statements) known = known || (s->kind == StmtKind::Param && s->name == name);
    if (!known)
      diagnostics.push_back({{},
                             fmt::format("unknown parameter '{}' set from outside (parameters: {})", name,
                                         names.empty() ? "none" : names),
                             {}});
  }
  Evaluator eval(out.slots, nullptr);
  for (const StmtPtr& s : program.statements) {
    if (s->kind != StmtKind::Param) continue;
    try {
      auto it = defines.find(s->name);
      const int64_t value = it != defines.end() ? it->second : eval.eval(*s->exprs[0]);
      out.slots[s->slot] = value;
      out.values.emplace_back(s.get(), value);
      for (const Where& w : s->wheres)
        if (eval.eval(*w.condition) == 0)
          diagnostics.push_back(
              {w.condition->start, fmt::format("{} = {}: {}", s->name, value, where_message(w, out.slots)), {}});
    } catch (const RunError& e) {
      diagnostics.push_back({e.location, e.message, e.hint});
      return out;
    }
  }
  return out;
}

CompiledProgram run_program(const Program& program, const SourceText& source,
                            const std::map<std::string, int64_t>& defines, const CompileOptions& options,
                            std::vector<LangDiagnostic>& diagnostics) {
  CompiledProgram out;
  const size_t before = diagnostics.size();
  const ParameterValues parameters = evaluate_parameters(program, defines, diagnostics);
  if (diagnostics.size() != before) return out;
  try {
    Interpreter(program, source, options).run(parameters, out);
  } catch (const RunError& e) {
    diagnostics.push_back({e.location, e.message, e.hint});
  } catch (const Error& e) {
    diagnostics.push_back({{}, e.what(), {}});
  }
  return out;
}

}  // namespace flexpipe::lang
