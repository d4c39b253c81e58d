// The checker: resolves a parsed program's names and checks it before it runs.
#include "checker.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "lexer.h"
#include "parser.h"

namespace flexpipe::lang {

int counter_family(ActionKind kind, int custom) {
  switch (kind) {
    case ActionKind::F: return 0;
    case ActionKind::B:
    case ActionKind::I: return 1;
    case ActionKind::W: return 2;
    case ActionKind::R: return 3;
    case ActionKind::Offload: return 4;
    case ActionKind::Reload: return 5;
    case ActionKind::SendF: return 6;
    case ActionKind::RecvF: return 7;
    case ActionKind::SendB: return 8;
    case ActionKind::RecvB: return 9;
    case ActionKind::Opt: return 10;
    case ActionKind::Custom: return kBuiltinCounterFamilies + custom;
    case ActionKind::Overlap: break;
  }
  return 0;
}

bool builtin_kind(const std::string& name, ActionKind& kind) {
  static const std::map<std::string, ActionKind> kinds =
      {{"F", ActionKind::F},           {"B", ActionKind::B},          {"I", ActionKind::I},
       {"W", ActionKind::W},           {"R", ActionKind::R},          {"OFFLOAD", ActionKind::Offload},
       {"RELOAD", ActionKind::Reload}, {"OPT", ActionKind::Opt},      {"SEND_F", ActionKind::SendF},
       {"RECV_F", ActionKind::RecvF},  {"SEND_B", ActionKind::SendB}, {"RECV_B", ActionKind::RecvB}};
  auto it = kinds.find(name);
  if (it == kinds.end()) return false;
  kind = it->second;
  return true;
}

namespace {

int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

enum class NameKind { Parameter, Variable, LoopVariable, Pattern };

struct Binding {
  std::string name;
  NameKind kind;
  int slot = -1;
  SourceLocation location;
  const Stmt* pattern = nullptr;
  bool array = false;  // a variable holding an array (`let a = array(n)`)
};

bool is_declaration(StmtKind kind) {
  switch (kind) {
    case StmtKind::Param:
    case StmtKind::Name:
    case StmtKind::Description:
    case StmtKind::Devices:
    case StmtKind::Microbatches:
    case StmtKind::Stages:
    case StmtKind::Pipelines:
    case StmtKind::Op:
    case StmtKind::Greedy: return true;
    default: return false;
  }
}

const char* keyword(StmtKind kind) {
  switch (kind) {
    case StmtKind::Param: return "param";
    case StmtKind::Name: return "name";
    case StmtKind::Description: return "description";
    case StmtKind::Devices: return "devices";
    case StmtKind::Microbatches: return "microbatches";
    case StmtKind::Stages: return "stages";
    case StmtKind::Pipelines: return "pipelines";
    case StmtKind::Op: return "op";
    case StmtKind::Greedy: return "greedy";
    default: return "";
  }
}

bool valid_op_name(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

class Checker {
 public:
  Checker(Program& program, std::vector<LangDiagnostic>& diagnostics) : program_(program), diagnostics_(diagnostics) {}

  void run() {
    scopes_.emplace_back();
    std::map<StmtKind, SourceLocation> declared;
    const Stmt* first_other = nullptr;
    const Stmt* first_action = nullptr;
    for (StmtPtr& stmt : program_.statements) {
      if (stmt->kind == StmtKind::Param && first_other != nullptr) {
        error(stmt->location,
              fmt::format("parameters come first: this 'param' follows a statement at {}:{}",
                          first_other->location.line, first_other->location.column),
              "move every param to the top of the program");
      }
      if (stmt->kind != StmtKind::Param && stmt->kind != StmtKind::Name && stmt->kind != StmtKind::Description &&
          first_other == nullptr)
        first_other = stmt.get();
      if (is_declaration(stmt->kind) && stmt->kind != StmtKind::Param && stmt->kind != StmtKind::Op) {
        auto [it, fresh] = declared.emplace(stmt->kind, stmt->location);
        if (!fresh)
          error(stmt->location, fmt::format("'{}' is declared twice (first at {}:{})", keyword(stmt->kind),
                                            it->second.line, it->second.column));
      }
      if (stmt->kind == StmtKind::Action && first_action == nullptr) first_action = stmt.get();
      statement(*stmt, true);
    }
    std::string missing;
    for (StmtKind required : {StmtKind::Devices, StmtKind::Microbatches, StmtKind::Stages})
      if (!declared.count(required)) missing += fmt::format("{}'{}'", missing.empty() ? "" : ", ", keyword(required));
    if (!missing.empty())
      error({1, 1}, fmt::format("the program never declares {}", missing),
            "every program declares devices, microbatches and stages, e.g. `devices p`");
    if (greedy_ != nullptr && !greedy_->greedy.written && !actions_.empty()) {
      error(actions_.front()->location, "a program with a greedy policy emits no actions of its own",
            fmt::format("the greedy policy at {}:{} writes every device's list; remove this action, or write "
                        "`prefer written` to have it reorder the lists written here",
                        greedy_->location.line, greedy_->location.column));
    }
    if (greedy_ != nullptr && greedy_->greedy.written && actions_.empty())
      error(greedy_->location, "`prefer written` reorders the program's lists, but the program writes no actions",
            "write each device's actions in priority order, or list the kinds to prefer");
    program_.num_slots = next_slot_;
  }

 private:
  void error(SourceLocation at, std::string message, std::string hint = {}) {
    diagnostics_.push_back({at, std::move(message), std::move(hint)});
  }

  const Binding* lookup(const std::string& name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope)
      for (const Binding& b : *scope)
        if (b.name == name) return &b;
    return nullptr;
  }

  std::string suggestion(const std::string& name, bool patterns) const {
    std::vector<std::string> names;
    for (const auto& scope : scopes_)
      for (const Binding& b : scope)
        if ((b.kind == NameKind::Pattern) == patterns) names.push_back(b.name);
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    for (const std::string& n : names)
      if (edit_distance(n, name) <= (name.size() <= 2 ? 1 : 2)) return fmt::format("did you mean '{}'?", n);
    if (names.empty()) return patterns ? "no pattern is defined here" : "no name is defined here";
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    return fmt::format("{} in scope: {}", patterns ? "patterns" : "names", list);
  }

  int define(const std::string& name, NameKind kind, SourceLocation at, const Stmt* pattern = nullptr,
             bool array = false) {
    for (const Binding& b : scopes_.back()) {
      if (b.name == name) {
        error(at, fmt::format("'{}' is already defined here (at {}:{})", name, b.location.line, b.location.column),
              "choose another name");
        return b.slot;
      }
    }
    const int slot = kind == NameKind::Pattern ? -1 : next_slot_++;
    scopes_.back().push_back({name, kind, slot, at, pattern, array});
    return slot;
  }

  void block(Block& body, std::vector<std::pair<std::string, NameKind>> bound = {}, std::vector<int>* slots = nullptr,
             SourceLocation at = {}) {
    scopes_.emplace_back();
    for (const auto& [name, kind] : bound) {
      const int slot = define(name, kind, at);
      if (slots != nullptr) slots->push_back(slot);
    }
    for (StmtPtr& stmt : body) statement(*stmt, false);
    scopes_.pop_back();
  }

  // ---- statements -------------------------------------------------------------------------------
  void statement(Stmt& s, bool top_level) {
    if (is_declaration(s.kind) && !top_level) {
      error(s.location, fmt::format("'{}' is a declaration: write it at the top level", keyword(s.kind)),
            "declarations cannot sit inside a block");
    }
    switch (s.kind) {
      case StmtKind::Param:
        expression(*s.exprs[0]);
        s.slot = define(s.name, NameKind::Parameter, s.name_location);
        for (Where& w : s.wheres) {
          expression(*w.condition);
          for (ExprPtr& value : w.shown) expression(*value);
        }
        break;
      case StmtKind::Name:
      case StmtKind::Description: break;
      case StmtKind::Devices:
      case StmtKind::Microbatches:
      case StmtKind::Repeat:
      case StmtKind::While:
      case StmtKind::On:
        for (ExprPtr& e : s.exprs) expression(*e);
        block(s.body);
        break;
      case StmtKind::Stages:
        expression(*s.exprs[0]);
        if (s.exprs.size() > 1) s.slot = bound_expression(*s.exprs[1], "s");
        break;
      case StmtKind::Pipelines:
        expression(*s.exprs[0]);
        s.slot = bound_expression(*s.exprs[1], "mb");
        break;
      case StmtKind::Let:
        s.array = array_value(*s.exprs[0]);
        s.slot = define(s.name, NameKind::Variable, s.name_location, nullptr, s.array != ArrayForm::None);
        break;
      case StmtKind::Assign: assignment(s); break;
      case StmtKind::For: {
        expression(*s.exprs[0]);
        expression(*s.exprs[1]);
        std::vector<int> slots;
        block(s.body, {{s.name, NameKind::LoopVariable}}, &slots, s.name_location);
        s.slot = slots.front();
        break;
      }
      case StmtKind::If:
        expression(*s.exprs[0]);
        block(s.body);
        block(s.else_body);
        break;
      case StmtKind::Pattern: {
        defining_.push_back(s.name);
        std::vector<std::pair<std::string, NameKind>> bound;
        for (const std::string& p : s.parameters) bound.emplace_back(p, NameKind::Variable);
        // The pattern's own name is bound after its body: a pattern cannot call itself.
        block(s.body, bound, &s.parameter_slots, s.name_location);
        defining_.pop_back();
        define(s.name, NameKind::Pattern, s.name_location, &s);
        break;
      }
      case StmtKind::Call:
      case StmtKind::Action: action(s); break;
      case StmtKind::Op: op(s); break;
      case StmtKind::Greedy: greedy(s); break;
    }
  }

  // A `let`'s or an assignment's value: a new array, a copy of an array variable, or (checked as an
  // expression) an integer.
  ArrayForm array_value(Expr& e) {
    if (e.kind == ExprKind::Call && e.name == "array") {
      e.builtin = Builtin::Array;
      if (e.args.empty() || e.args.size() > 2)
        error(e.location, fmt::format("array takes a size and optionally a value (got {} arguments)", e.args.size()),
              "e.g. array(p) for p zeros, array(p, -1) for p times -1");
      for (ExprPtr& arg : e.args) expression(*arg);
      return ArrayForm::Create;
    }
    if (e.kind == ExprKind::Variable)
      if (const Binding* b = lookup(e.name); b != nullptr && b->array) {
        e.slot = b->slot;
        return ArrayForm::Copy;
      }
    expression(e);
    return ArrayForm::None;
  }

  void assignment(Stmt& s) {
    const Binding* b = lookup(s.name);
    if (s.index) {
      expression(*s.index);
      expression(*s.exprs[0]);
      if (b == nullptr) {
        error(s.name_location, fmt::format("unknown array '{}'", s.name),
              fmt::format("declare it first with `let {} = array(n)`", s.name));
      } else if (!b->array) {
        error(s.name_location, fmt::format("'{}' is not an array", s.name),
              fmt::format("declare an array with `let {} = array(n)`", s.name));
      } else {
        s.slot = b->slot;
      }
      return;
    }
    if (b != nullptr && b->array) {
      s.array = array_value(*s.exprs[0]);
      if (s.array == ArrayForm::None)
        error(s.exprs[0]->start, fmt::format("'{}' is an array: assign it a whole array or set one element", s.name),
              fmt::format("{0} = array(n), {0} = other_array, or {0}[i] = value", s.name));
      else if (s.assign_op != Op::Eq)
        error(s.name_location, fmt::format("'{}' is an array: += and -= change one element", s.name),
              fmt::format("write {}[i] {}= value", s.name, s.assign_op == Op::Add ? "+" : "-"));
      s.slot = b->slot;
      return;
    }
    expression(*s.exprs[0]);
    if (b == nullptr) {
      error(s.name_location, fmt::format("unknown variable '{}'", s.name),
            fmt::format("declare it first with `let {} = ...`", s.name));
    } else if (b->kind == NameKind::Parameter) {
      error(s.name_location, fmt::format("cannot assign to parameter '{}'", s.name),
            "parameters are fixed once set; copy it with `let`");
    } else if (b->kind == NameKind::LoopVariable) {
      error(s.name_location, fmt::format("cannot assign to loop variable '{}'", s.name),
            "use a `while` loop to control the counter yourself");
    } else if (b->kind == NameKind::Pattern) {
      error(s.name_location, fmt::format("'{}' is a pattern, not a variable", s.name));
    } else {
      s.slot = b->slot;
    }
  }

  int bound_expression(Expr& e, const char* variable) {
    scopes_.emplace_back();
    const int slot = define(variable, NameKind::LoopVariable, e.location);
    if (e.kind == ExprKind::List) {
      for (ExprPtr& element : e.args) expression(*element);
    } else {
      expression(e);
    }
    scopes_.pop_back();
    return slot;
  }

  void action(Stmt& s) {
    ActionForm& head = s.actions[0];
    if (const Binding* b = lookup(head.kind_name); b != nullptr && b->kind == NameKind::Pattern) {
      s.kind = StmtKind::Call;
      s.pattern = b->pattern;
      for (ExprPtr& arg : head.args) expression(*arg);
      if (s.actions.size() > 1) error(s.actions[1].location, "'&' joins two actions, not pattern calls");
      if (head.args.size() != b->pattern->parameters.size())
        error(head.location,
              fmt::format("pattern '{}' takes {} argument{}, not {}", head.kind_name, b->pattern->parameters.size(),
                          b->pattern->parameters.size() == 1 ? "" : "s", head.args.size()),
              fmt::format("defined at {}:{}", b->location.line, b->location.column));
      return;
    }
    actions_.push_back(&s);
    for (ActionForm& form : s.actions) action_form(form);
    if (s.actions.size() == 2) {
      if (s.actions[0].kind != ActionKind::F || s.actions[0].custom >= 0)
        error(s.actions[0].location, "an overlapped action starts with its forward: F(...) & B(...)");
      if ((s.actions[1].kind != ActionKind::B && s.actions[1].kind != ActionKind::I) || s.actions[1].custom >= 0)
        error(s.actions[1].location, "the second half of an overlapped action is a backward, B or I");
    }
  }

  void action_form(ActionForm& form) {
    for (ExprPtr& arg : form.args) expression(*arg);
    const size_t n = form.args.size();
    if (builtin_kind(form.kind_name, form.kind)) {
      if (form.kind == ActionKind::Opt) {
        if (n != 1) error(form.location, fmt::format("OPT takes one argument, the stage (got {})", n));
      } else if (n == 0 && form.kind != ActionKind::W) {
        error(form.location, fmt::format("{}() needs a stage", form.kind_name),
              fmt::format("write {}(s) for the next micro-batch of stage s, or {}(s, mb)", form.kind_name,
                          form.kind_name));
      } else if (n > 2) {
        error(form.location, fmt::format("{} takes a stage and a micro-batch, not {} arguments", form.kind_name, n));
      }
      return;
    }
    for (size_t i = 0; i < program_.ops.size(); ++i) {
      if (program_.ops[i]->name != form.kind_name) continue;
      form.kind = ActionKind::Custom;
      form.custom = static_cast<int>(i);
      const bool stagewide = program_.ops[i]->op.stagewide;
      if (stagewide && n != 1)
        error(form.location,
              fmt::format("{} is stagewide: it takes one argument, the stage (got {})", form.kind_name, n));
      else if (n == 0 || n > 2)
        error(form.location,
              fmt::format("{} takes a stage and optionally a micro-batch (got {} arguments)", form.kind_name, n));
      return;
    }
    if (const Binding* b = lookup(form.kind_name); b != nullptr) {
      error(form.location, fmt::format("'{}' is a variable, not an action or pattern", form.kind_name));
      return;
    }
    if (std::find(defining_.begin(), defining_.end(), form.kind_name) != defining_.end()) {
      error(form.location, fmt::format("pattern '{}' cannot call itself", form.kind_name),
            "patterns do not recurse: write the repetition with for, repeat or while");
      return;
    }
    std::string hint = suggestion(form.kind_name, true);
    if (valid_op_name(form.kind_name))
      hint = fmt::format(
          "action kinds: F B I W R OFFLOAD RELOAD OPT SEND_F RECV_F SEND_B RECV_B; declare a new one "
          "with `op {} {{ ... }}` before its first use",
          form.kind_name);
    error(form.location, fmt::format("unknown action or pattern '{}'", form.kind_name), hint);
  }

  void op(Stmt& s) {
    ActionKind ignored;
    if (!valid_op_name(s.name)) {
      error(s.name_location, fmt::format("operation name '{}' must be upper case", s.name),
            "letters A-Z, digits and '_', e.g. OFFLOAD_KV");
    } else if (builtin_kind(s.name, ignored) || s.name == "OVERLAP_F_B" || s.name == "CUSTOM") {
      error(s.name_location, fmt::format("'{}' is a built-in action kind", s.name), "choose another name");
    }
    for (const Stmt* other : program_.ops)
      if (other->name == s.name)
        error(s.name_location, fmt::format("operation '{}' is declared twice (first at {}:{})", s.name,
                                           other->location.line, other->location.column));
    for (auto* deps : {&s.op.after, &s.op.before})
      for (const Dependency& dep : *deps)
        if (!builtin_kind(dep.kind_name, ignored))
          error(dep.location, fmt::format("a dependency names a built-in action kind, not '{}'", dep.kind_name),
                "F B I W R OFFLOAD RELOAD OPT SEND_F RECV_F SEND_B RECV_B");
    for (ExprPtr* e : {&s.op.duration, &s.op.memory})
      if (*e) expression(**e, true);
    program_.ops.push_back(&s);
  }

  void greedy(Stmt& s) {
    greedy_ = &s;
    GreedyDecl& g = s.greedy;
    const auto written = std::find(g.prefer.begin(), g.prefer.end(), "written");
    if (written != g.prefer.end()) {
      if (g.prefer.size() > 1)
        error(g.prefer_locations[written - g.prefer.begin()],
              "`prefer written` stands alone: the written lists are the whole priority");
      g.written = true;
    }
    std::vector<std::string> kinds;
    for (size_t i = 0; i < g.prefer.size() && !g.written; ++i) {
      const std::string& k = g.prefer[i];
      if (k != "F" && k != "B" && k != "I" && k != "W")
        error(g.prefer_locations[i], fmt::format("the greedy policy runs F, B, I and W, not '{}'", k));
      else if (std::find(kinds.begin(), kinds.end(), k) != kinds.end())
        error(g.prefer_locations[i], fmt::format("'{}' is listed twice", k));
      kinds.push_back(k);
    }
    std::vector<std::string> sorted = kinds;
    std::sort(sorted.begin(), sorted.end());
    if (!g.written && sorted != std::vector<std::string>{"B", "F"} && sorted != std::vector<std::string>{"F", "I", "W"})
      error(s.location, "`prefer` lists the kinds to run: F and B, or F, I and W",
            "e.g. `prefer B, F` for 1F1B, `prefer I, F, W` to fill bubbles with W, `prefer written` for the "
            "program's own order");
    if (g.written) kinds = {"F", "B", "I", "W"};
    for (size_t i = 0; i < g.time.size(); ++i) {
      if (std::find(kinds.begin(), kinds.end(), g.time[i].first) == kinds.end())
        error(g.time_locations[i], fmt::format("'{}' has a time but is not in `prefer`", g.time[i].first));
      expression(*g.time[i].second);
    }
    std::vector<std::string> cooling;
    for (size_t i = 0; i < g.cooldown.size(); ++i) {
      const std::string& k = g.cooldown[i];
      if (k != "B" && k != "I" && k != "W")
        error(g.cooldown_locations[i], fmt::format("`cooldown` ranks B, I and W, not '{}'", k),
              "the cool-down starts once a device has started its last F: only backwards remain");
      else if (std::find(cooling.begin(), cooling.end(), k) != cooling.end())
        error(g.cooldown_locations[i], fmt::format("'{}' is listed twice", k));
      else if (std::find(kinds.begin(), kinds.end(), k) == kinds.end())
        error(g.cooldown_locations[i], fmt::format("'{}' is in `cooldown` but not in `prefer`", k));
      cooling.push_back(k);
    }
    if (g.inflight) g.device_slot = bound_expression(*g.inflight, "d");
  }

  // ---- expressions ------------------------------------------------------------------------------
  void expression(Expr& e, bool real_allowed = false) {
    switch (e.kind) {
      case ExprKind::Integer: return;
      case ExprKind::Real:
        if (!real_allowed)
          error(e.location, fmt::format("{} is not an integer", e.real),
                "reals are allowed only in an op's duration and memory");
        return;
      case ExprKind::Variable: {
        const Binding* b = lookup(e.name);
        if (b == nullptr) {
          ActionKind ignored;
          std::string hint = builtin_kind(e.name, ignored) ? "action kinds are named only in count(K, s) and actions"
                                                           : suggestion(e.name, false);
          error(e.location, fmt::format("unknown name '{}'", e.name), hint);
        } else if (b->kind == NameKind::Pattern) {
          error(e.location, fmt::format("'{}' is a pattern, not a value", e.name));
        } else if (b->array) {
          error(e.location, fmt::format("'{}' is an array, not a value", e.name),
                fmt::format("read one element, {}[i]; copy it whole with `let other = {}`", e.name, e.name));
        } else {
          e.slot = b->slot;
        }
        return;
      }
      case ExprKind::Index: {
        expression(*e.args[0], false);
        const Binding* b = lookup(e.name);
        if (b == nullptr)
          error(e.location, fmt::format("unknown array '{}'", e.name), suggestion(e.name, false));
        else if (!b->array)
          error(e.location, fmt::format("'{}' is not an array", e.name),
                fmt::format("declare an array with `let {} = array(n)`", e.name));
        else
          e.slot = b->slot;
        return;
      }
      case ExprKind::List:
        error(e.location, "a list is only a placement (stages N placed [...]) or a route (pipelines K route [...])");
        return;
      case ExprKind::Call: call(e, real_allowed); return;
      default:
        for (ExprPtr& arg : e.args) expression(*arg, real_allowed);
        return;
    }
  }

  void call(Expr& e, bool real_allowed) {
    static const std::map<std::string, Builtin> builtins = {{"min", Builtin::Min},
                                                            {"max", Builtin::Max},
                                                            {"abs", Builtin::Abs},
                                                            {"device", Builtin::Device},
                                                            {"count", Builtin::Count}};
    if (e.name == "array") {
      error(e.location, "array(n) makes a whole array: it is only the value of a `let` or of an assignment",
            "e.g. let a = array(p), then a[i] = 1");
      return;
    }
    auto it = builtins.find(e.name);
    if (it == builtins.end()) {
      const Binding* b = lookup(e.name);
      if (b != nullptr && b->kind == NameKind::Pattern)
        error(e.location, fmt::format("pattern '{}' is a statement, not a value", e.name),
              "call it on a line of its own");
      else
        error(e.location, fmt::format("unknown function '{}'", e.name),
              "functions: min, max, abs, device, count, and array in a `let`");
      return;
    }
    e.builtin = it->second;
    const size_t n = e.args.size();
    if (e.builtin == Builtin::Count) {
      if (n != 2) {
        error(e.location, fmt::format("count takes an action kind and a stage (got {} arguments)", n),
              "e.g. count(F, s)");
        return;
      }
      const Expr& kind = *e.args[0];
      ActionKind k;
      int custom = -1;
      bool known = kind.kind == ExprKind::Variable && builtin_kind(kind.name, k);
      for (size_t i = 0; !known && kind.kind == ExprKind::Variable && i < program_.ops.size(); ++i) {
        if (program_.ops[i]->name == kind.name) {
          known = true;
          k = ActionKind::Custom;
          custom = static_cast<int>(i);
        }
      }
      if (!known) {
        error(kind.location, "count's first argument is an action kind", "e.g. count(F, s), count(W, s)");
        return;
      }
      e.counter = counter_family(k, custom);
      expression(*e.args[1], real_allowed);
      return;
    }
    const bool one = e.builtin == Builtin::Abs || e.builtin == Builtin::Device;
    if ((one && n != 1) || (!one && n == 0))
      error(e.location, fmt::format("{} takes {} (got {})", e.name, one ? "one argument" : "at least one argument", n));
    for (ExprPtr& arg : e.args) expression(*arg, real_allowed);
  }

  Program& program_;
  std::vector<LangDiagnostic>& diagnostics_;
  std::vector<std::vector<Binding>> scopes_;
  std::vector<const Stmt*> actions_;
  const Stmt* greedy_ = nullptr;
  std::vector<std::string> defining_;  // patterns whose bodies are being checked
  int next_slot_ = 0;
};

}  // namespace

void check(Program& program, std::vector<LangDiagnostic>& diagnostics) { Checker(program, diagnostics).run(); }

Program parse_and_check(const SourceText& source, std::vector<LangDiagnostic>& diagnostics) {
  const size_t before = diagnostics.size();
  Program program = parse(tokenize(source, diagnostics), diagnostics);
  if (diagnostics.size() == before) check(program, diagnostics);
  return program;
}

}  // namespace flexpipe::lang
