// program_parameters: a program's parameters, values, the bounds their conditions state, failures.
#include "flexpipe/lang/parameters.h"

#include <algorithm>

#include <fmt/format.h>

#include "checker.h"
#include "flexpipe/support/error.h"
#include "interpreter.h"

namespace flexpipe {

namespace {

using lang::Expr;
using lang::ExprKind;
using lang::Op;

bool mentions(const Expr& e, int slot) {
  if (e.kind == ExprKind::Variable && e.slot == slot) return true;
  return std::any_of(e.args.begin(), e.args.end(), [&](const lang::ExprPtr& a) { return mentions(*a, slot); });
}

// Tightens [min, max] from a condition: a conjunction of comparisons of the parameter with
// expressions of earlier parameters. Anything else (or, %, the parameter on both sides) says nothing.
void bound(const Expr& e, int slot, std::vector<int64_t>& slots, ProgramParameter& out) {
  if (e.kind != ExprKind::Binary) return;
  if (e.op == Op::And) {
    bound(*e.args[0], slot, slots, out);
    bound(*e.args[1], slot, slots, out);
    return;
  }
  const Expr* lhs = e.args[0].get();
  const Expr* rhs = e.args[1].get();
  Op op = e.op;
  if (!(lhs->kind == ExprKind::Variable && lhs->slot == slot)) {
    std::swap(lhs, rhs);
    switch (op) {  // mirror: e < x is x > e
      case Op::Lt: op = Op::Gt; break;
      case Op::Le: op = Op::Ge; break;
      case Op::Gt: op = Op::Lt; break;
      case Op::Ge: op = Op::Le; break;
      default: break;
    }
  }
  if (!(lhs->kind == ExprKind::Variable && lhs->slot == slot) || mentions(*rhs, slot)) return;
  int64_t v = 0;
  try {
    v = lang::evaluate_constant(*rhs, slots);
  } catch (const lang::RunError&) {
    return;
  }
  auto raise_min = [&](int64_t x) { out.min = out.min ? std::max(*out.min, x) : x; };
  auto lower_max = [&](int64_t x) { out.max = out.max ? std::min(*out.max, x) : x; };
  switch (op) {
    case Op::Ge: raise_min(v); break;
    case Op::Gt:
      if (v < INT64_MAX) raise_min(v + 1);
      break;
    case Op::Le: lower_max(v); break;
    case Op::Lt:
      if (v > INT64_MIN) lower_max(v - 1);
      break;
    case Op::Eq:
      raise_min(v);
      lower_max(v);
      break;
    default: break;
  }
}

}  // namespace

std::vector<ProgramParameter> program_parameters(const std::string& text, const std::string& origin,
                                                 const std::map<std::string, int64_t>& defines) {
  using namespace lang;
  const SourceText source(origin, text);
  std::vector<LangDiagnostic> diagnostics;
  const Program program = parse_and_check(source, diagnostics);
  if (!diagnostics.empty()) throw Error(format_diagnostics(source, diagnostics));
  std::vector<LangDiagnostic> failures;
  ParameterValues values = evaluate_parameters(program, defines, failures);
  std::vector<ProgramParameter> out;
  for (const auto& [stmt, value] : values.values) {
    ProgramParameter p;
    p.name = stmt->name;
    p.value = value;
    p.location = stmt->location;
    for (const Where& w : stmt->wheres) {
      const Expr& c = *w.condition;
      std::string message = w.message;
      try {
        message = where_message(w, values.slots);
      } catch (const RunError&) {  // a value it cannot show: the message as written
      }
      p.conditions.push_back(fmt::format("{}: {}", text.substr(c.begin, c.end - c.begin), message));
      bound(c, stmt->slot, values.slots, p);
      bool holds = false;
      try {
        holds = evaluate_constant(c, values.slots) != 0;
      } catch (const RunError&) {}
      if (!holds) p.failures.push_back(message);
      p.satisfied = p.satisfied && holds;
    }
    out.push_back(std::move(p));
  }
  // Failing conditions only clear `satisfied`; an unknown define or a default that cannot be
  // evaluated is an error.
  for (const LangDiagnostic& f : failures) {
    bool condition = false;
    for (const auto& [stmt, value] : values.values)
      for (const Where& w : stmt->wheres) condition = condition || w.condition->start == f.location;
    if (!condition) throw Error(format_diagnostics(source, {f}));
  }
  return out;
}

}  // namespace flexpipe
