// The schedule language's syntax tree (internal).
#pragma once
// Internal to the schedule language: the syntax tree. Names are resolved in place by the checker
// (variables to slots of one flat frame, calls to patterns, action names to kinds).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flexpipe/ir/action.h"
#include "source.h"

namespace flexpipe::lang {

enum class Op : uint8_t { Add, Sub, Mul, Div, Mod, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Not, Neg };

enum class ExprKind : uint8_t { Integer, Real, Variable, Unary, Binary, Conditional, Call, List, Index };

enum class Builtin : uint8_t { None, Min, Max, Abs, Device, Count, Array };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::Integer;
  SourceLocation location;    // binary operators: the operator
  SourceLocation start;       // the expression's first token
  size_t begin = 0, end = 0;  // byte range in the source
  Op op = Op::Add;
  int64_t integer = 0;
  double real = 0;
  std::string name;           // Variable, Call, Index (the array)
  std::vector<ExprPtr> args;  // operands, arguments, list elements; Index: the index
  int height = 1;             // this node and the longest path below it: the parser bounds it
  // Resolved by the checker:
  int slot = -1;  // Variable, Index
  Builtin builtin = Builtin::None;
  int counter = -1;  // count(K, s): the counter family of K
};

// A reference to an action kind with its arguments: `F(s, mb)`, `F(s)`, `W()`, `UNSHARD(s)`.
struct ActionForm {
  std::string kind_name;
  SourceLocation location;
  std::vector<ExprPtr> args;
  // Resolved by the checker:
  ActionKind kind = ActionKind::F;
  int custom = -1;  // index into the program's ops
};

struct Dependency {
  std::string kind_name;
  SourceLocation location;
  int stage_offset = 0;
  bool all_microbatches = false;
};

struct OpDecl {
  std::vector<Dependency> after, before;
  ExprPtr duration, memory;  // null: 0
  bool communicates = false;
  bool stagewide = false;
};

struct GreedyDecl {
  std::vector<std::string> prefer;  // kinds, or the one word `written`
  std::vector<SourceLocation> prefer_locations;
  std::vector<std::string> cooldown;
  std::vector<SourceLocation> cooldown_locations;
  std::vector<std::pair<std::string, ExprPtr>> time;
  std::vector<SourceLocation> time_locations;
  ExprPtr inflight;  // in d; null: unlimited
  int device_slot = -1;
  bool written = false;  // set by the checker: `prefer written`
};

enum class PlacementForm : uint8_t { Loop, VShape, List, Expression };

// `where CONDITION "MESSAGE"`. A message may show values: each `{EXPR}` in it is evaluated with the
// parameters when the condition fails ("needs m >= 2p = {2 * p}"); `text` holds the pieces around
// them, one more than `shown`.
struct Where {
  ExprPtr condition;
  std::string message;  // as written, braces included
  std::vector<std::string> text;
  std::vector<ExprPtr> shown;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Block = std::vector<StmtPtr>;

// How a `let` or an assignment sets its variable: an integer, a new array (`array(n[, v])`), or a
// copy of another array (`let b = a`, `b = a`).
enum class ArrayForm : uint8_t { None, Create, Copy };

enum class StmtKind : uint8_t {
  Param,
  Name,
  Description,
  Devices,
  Microbatches,
  Stages,
  Pipelines,  // declarations
  Let,
  Assign,
  For,
  Repeat,
  While,
  If,
  On,
  Pattern,
  Call,
  Action,
  Op,
  Greedy,
};

struct Stmt {
  StmtKind kind = StmtKind::Let;
  SourceLocation location;
  std::string name;  // Param, Let, Assign, For: variable; Pattern, Call, Op: name; Name: the schedule name;
                     // Description: the description
  SourceLocation name_location;
  Op assign_op = Op::Eq;                          // Assign: Eq for `=`, Add for `+=`, Sub for `-=`
  std::vector<ExprPtr> exprs;                     // see parser: the statement's expressions in source order
  ExprPtr index;                                  // Assign to an element, `a[i] = v`: i (the value is exprs[0])
  std::vector<Where> wheres;                      // Param
  bool reversed = false;                          // For
  PlacementForm placement = PlacementForm::Loop;  // Stages
  Block body, else_body;                          // For, Repeat, While, If, On, Pattern
  std::vector<std::string> parameters;            // Pattern
  std::vector<int> parameter_slots;               // Pattern
  std::vector<ActionForm> actions;                // Action: one, or two for an overlap
  OpDecl op;
  GreedyDecl greedy;
  // Resolved by the checker:
  int slot = -1;                      // Param, Let, Assign, For: the variable; Stages: s; Pipelines: mb
  const Stmt* pattern = nullptr;      // Call
  ArrayForm array = ArrayForm::None;  // Let, Assign: whole arrays; Copy reads exprs[0]'s slot
};

struct Program {
  Block statements;
  int num_slots = 0;
  std::vector<const Stmt*> ops;  // in declaration order (set by the checker)
};

}  // namespace flexpipe::lang
