// The parser: tokens to a syntax tree, recovering after each syntax error at the next statement.
#include "parser.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace flexpipe::lang {

namespace {

constexpr int kMaxNesting = 64;  // blocks and parentheses; deeper input is rejected, not recursed into
// The checker, the interpreter and the writer walk an expression recursively, one call per level, and
// a chain `0+0+...` is as deep as it is long: 21 thousand terms overflowed the stack.
constexpr int kMaxExpressionHeight = 1000;

struct SyntaxError {
  SourceLocation location;
  std::string message;
  std::string hint;
};

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::End: return "the end of the file";
    case TokenKind::String: return fmt::format("string \"{}\"", token.text);
    case TokenKind::Integer:
    case TokenKind::Real: return fmt::format("number {}", token.text);
    default: return fmt::format("'{}'", token.text);
  }
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, std::vector<LangDiagnostic>& diagnostics)
      : tokens_(tokens), diagnostics_(diagnostics) {}

  Program run() {
    Program program;
    while (!at_end()) {
      if (is_punct("}")) {
        report({peek().location, "unmatched '}'", "remove it, or open its block with '{'"});
        ++pos_;
        continue;
      }
      if (StmtPtr stmt = statement_or_recover()) program.statements.push_back(std::move(stmt));
    }
    return program;
  }

 private:
  // ---- tokens ---------------------------------------------------------------------------------
  const Token& peek(size_t ahead = 0) const {
    const size_t i = pos_ + ahead;
    return i < tokens_.size() ? tokens_[i] : tokens_.back();
  }
  bool at_end() const { return peek().kind == TokenKind::End; }
  bool is_punct(const char* symbol, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::Punct && peek(ahead).text == symbol;
  }
  bool is_word(const char* word, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::Name && peek(ahead).text == word;
  }
  const Token& next() {
    const Token& t = peek();
    if (!at_end()) ++pos_;
    return t;
  }
  bool accept_punct(const char* symbol) {
    if (!is_punct(symbol)) return false;
    ++pos_;
    return true;
  }
  bool accept_word(const char* word) {
    if (!is_word(word)) return false;
    ++pos_;
    return true;
  }
  [[noreturn]] void fail(const Token& at, std::string message, std::string hint = {}) {
    throw SyntaxError{at.location, std::move(message), std::move(hint)};
  }
  const Token& expect_punct(const char* symbol, const char* context) {
    if (!is_punct(symbol)) fail(peek(), fmt::format("expected '{}' {}, found {}", symbol, context, describe(peek())));
    return next();
  }
  const Token& expect_name(const char* what) {
    if (peek().kind != TokenKind::Name) fail(peek(), fmt::format("expected {}, found {}", what, describe(peek())));
    return next();
  }
  const Token& expect_new_name(const char* what) {
    const Token& t = expect_name(what);
    if (is_reserved(t.text))
      fail(t, fmt::format("'{}' is a reserved word and cannot name {}", t.text, what), "choose another name");
    return t;
  }
  void expect_word(const char* word, const char* context) {
    if (!accept_word(word)) fail(peek(), fmt::format("expected '{}' {}, found {}", word, context, describe(peek())));
  }

  void report(LangDiagnostic diagnostic) { diagnostics_.push_back(std::move(diagnostic)); }

  struct Nesting {
    explicit Nesting(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxNesting)
        parser.fail(parser.peek(), fmt::format("nesting deeper than {} levels", kMaxNesting),
                    "split the program into patterns");
    }
    ~Nesting() { --parser.depth_; }
    Parser& parser;
  };

  // ---- statements -------------------------------------------------------------------------------
  StmtPtr statement_or_recover() {
    const size_t start = pos_;
    const int depth = depth_;
    try {
      return statement();
    } catch (const SyntaxError& e) {
      depth_ = depth;
      report({e.location, e.message, e.hint});
      recover(start, e.location.line);
      return nullptr;
    }
  }

  // Skips to the first token on a later line than the error that starts a statement at the
  // nesting level where the failed statement began, or to the '}' closing that level.
  void recover(size_t start, int error_line) {
    pos_ = start;
    int braces = 0;
    bool moved = false;
    while (!at_end()) {
      const Token& t = peek();
      if (moved && braces == 0 && t.location.line > error_line && t.kind == TokenKind::Name) return;
      if (is_punct("{")) ++braces;
      if (is_punct("}")) {
        if (braces == 0) return;
        --braces;
      }
      ++pos_;
      moved = true;
    }
  }

  StmtPtr make(StmtKind kind, const Token& at) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = kind;
    stmt->location = at.location;
    return stmt;
  }

  StmtPtr statement() {
    while (accept_punct(";")) {}
    const Token& first = peek();
    if (first.kind != TokenKind::Name)
      fail(first, fmt::format("expected a statement, found {}", describe(first)),
           "a statement starts with a keyword (let, for, if, ...), an action such as F(s, mb), or a pattern call");
    const std::string& w = first.text;
    if (w == "param") return param();
    if (w == "name") return string_declaration(StmtKind::Name, "the schedule's name", "write name \"my-schedule\"");
    if (w == "description")
      return string_declaration(StmtKind::Description, "the schedule's description",
                                "write description \"1F1B: one forward and one backward in turn\"");
    if (w == "devices") return with_exprs(StmtKind::Devices, 1);
    if (w == "microbatches") {
      StmtPtr s = with_exprs(StmtKind::Microbatches, 1);
      if (accept_word("padded")) {
        expect_word("to", "after 'padded'");
        s->exprs.push_back(expression());
      }
      return s;
    }
    if (w == "stages") return stages();
    if (w == "pipelines") {
      StmtPtr s = with_exprs(StmtKind::Pipelines, 1);
      expect_word("route", "after the number of pipelines (pipelines K route EXPR)");
      s->exprs.push_back(expression());
      return s;
    }
    if (w == "let") {
      next();
      StmtPtr s = make(StmtKind::Let, first);
      const Token& name = expect_new_name("a variable");
      s->name = name.text;
      s->name_location = name.location;
      expect_punct("=", "after the variable's name");
      s->exprs.push_back(expression());
      return s;
    }
    if (w == "for") return for_loop();
    if (w == "repeat") return with_body(with_exprs(StmtKind::Repeat, 1));
    if (w == "while") return with_body(with_exprs(StmtKind::While, 1));
    if (w == "if") return if_statement();
    if (w == "on") return with_body(with_exprs(StmtKind::On, 1));
    if (w == "pattern") return pattern();
    if (w == "op") return op();
    if (w == "greedy") return greedy();
    if (w == "else") fail(first, "'else' without 'if'");
    if (w == "where") fail(first, "'where' must follow a param's default on the same statement");
    if (is_punct("=", 1) || is_punct("+=", 1) || is_punct("-=", 1)) {
      next();
      StmtPtr s = make(StmtKind::Assign, first);
      s->name = first.text;
      s->name_location = first.location;
      const std::string op = next().text;
      s->assign_op = op == "=" ? Op::Eq : op == "+=" ? Op::Add : Op::Sub;
      s->exprs.push_back(expression());
      return s;
    }
    if (is_punct("[", 1)) return element_assignment();
    if (is_punct("(", 1)) return call_or_action();
    fail(first, fmt::format("expected a statement, found '{}'", w),
         fmt::format("to run an action or pattern write {}(...); to change a variable write {} = ...", w, w));
  }

  // `a[i] = v`, `a[i] += v`, `a[i] -= v`.
  StmtPtr element_assignment() {
    const Token& first = next();
    StmtPtr s = make(StmtKind::Assign, first);
    s->name = first.text;
    s->name_location = first.location;
    expect_punct("[", "after the array's name");
    s->index = expression();
    expect_punct("]", "to close the index");
    if (!is_punct("=") && !is_punct("+=") && !is_punct("-="))
      fail(peek(), fmt::format("expected '=', '+=' or '-=' after {}[...], found {}", first.text, describe(peek())),
           fmt::format("an element is set with {}[i] = value", first.text));
    const std::string op = next().text;
    s->assign_op = op == "=" ? Op::Eq : op == "+=" ? Op::Add : Op::Sub;
    s->exprs.push_back(expression());
    return s;
  }

  StmtPtr with_exprs(StmtKind kind, int count) {
    StmtPtr s = make(kind, next());
    for (int i = 0; i < count; ++i) s->exprs.push_back(expression());
    return s;
  }

  StmtPtr with_body(StmtPtr s) {
    s->body = block();
    return s;
  }

  Block block() {
    Nesting nesting(*this);
    const Token& open = peek();
    expect_punct("{", "to open a block");
    Block body;
    for (;;) {
      while (accept_punct(";")) {}
      if (accept_punct("}")) return body;
      if (at_end()) fail(open, "this '{' is never closed", "add '}' at the end of the block");
      if (StmtPtr stmt = statement_or_recover()) body.push_back(std::move(stmt));
    }
  }

  StmtPtr param() {
    StmtPtr s = make(StmtKind::Param, next());
    const Token& name = expect_new_name("a parameter");
    s->name = name.text;
    s->name_location = name.location;
    expect_punct("=", "after the parameter's name (param NAME = DEFAULT)");
    s->exprs.push_back(expression());
    while (accept_word("where")) {
      Where where;
      where.condition = expression();
      if (peek().kind != TokenKind::String)
        fail(peek(), fmt::format("expected the message shown when the condition fails, found {}", describe(peek())),
             "write: where p >= 2 \"needs at least 2 devices\"");
      split_message(next(), where);
      s->wheres.push_back(std::move(where));
    }
    return s;
  }

  // `name "..."`, `description "..."`.
  StmtPtr string_declaration(StmtKind kind, const char* what, const char* hint) {
    StmtPtr s = make(kind, next());
    if (peek().kind != TokenKind::String)
      fail(peek(), fmt::format("expected {} as a string, found {}", what, describe(peek())), hint);
    s->name = next().text;
    return s;
  }

  // A `where` message's pieces around its `{EXPR}` values, each value parsed as an expression and
  // located where it stands in the string.
  void split_message(const Token& message, Where& where) {
    const std::string& text = message.text;
    where.message = text;
    where.text.emplace_back();
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '{') {
        where.text.back() += text[i];
        continue;
      }
      const size_t close = text.find('}', i);
      if (close == std::string::npos)
        fail(message, "'{' opens a value in the message, but no '}' closes it",
             "a message shows a value as {EXPR}: \"needs m >= 2p = {2 * p}\"");
      where.shown.push_back(shown_value(text.substr(i + 1, close - i - 1), message.location, static_cast<int>(i) + 1));
      where.text.emplace_back();
      i = close;
    }
  }

  // The expression `inner`, which starts `offset` characters into the string at `at`.
  ExprPtr shown_value(const std::string& inner, SourceLocation at, int offset) {
    auto relocate = [&](SourceLocation l) { return SourceLocation{at.line, at.column + offset + l.column}; };
    std::vector<LangDiagnostic> diagnostics;
    const std::vector<Token> tokens = tokenize(SourceText("", inner), diagnostics);
    if (!diagnostics.empty()) throw SyntaxError{relocate(diagnostics[0].location), diagnostics[0].message, {}};
    Parser value(tokens, diagnostics_);
    value.depth_ = depth_;
    try {
      ExprPtr e = value.expression();
      if (!value.at_end())
        value.fail(value.peek(), fmt::format("expected '}}' after the value, found {}", describe(value.peek())));
      relocate_expression(*e, relocate);
      return e;
    } catch (const SyntaxError& e) {
      throw SyntaxError{relocate(e.location), e.message, e.hint};
    }
  }

  template <class Relocate>
  static void relocate_expression(Expr& e, const Relocate& relocate) {
    e.location = relocate(e.location);
    e.start = relocate(e.start);
    for (ExprPtr& arg : e.args) relocate_expression(*arg, relocate);
  }

  StmtPtr stages() {
    StmtPtr s = with_exprs(StmtKind::Stages, 1);
    if (accept_word("placed")) {
      if (accept_word("loop")) {
        s->placement = PlacementForm::Loop;
      } else if (accept_word("vshape")) {
        s->placement = PlacementForm::VShape;
      } else {
        s->exprs.push_back(expression());
        s->placement = s->exprs.back()->kind == ExprKind::List ? PlacementForm::List : PlacementForm::Expression;
      }
    }
    return s;
  }

  StmtPtr for_loop() {
    StmtPtr s = make(StmtKind::For, next());
    const Token& name = expect_new_name("a loop variable");
    s->name = name.text;
    s->name_location = name.location;
    expect_word("in", "after the loop variable (for i in 0..n)");
    s->exprs.push_back(expression());
    expect_punct("..", "in the range (for i in FROM..TO)");
    s->exprs.push_back(expression());
    s->reversed = accept_word("reversed");
    s->body = block();
    return s;
  }

  StmtPtr if_statement() {
    StmtPtr s = with_body(with_exprs(StmtKind::If, 1));
    if (accept_word("else")) {
      if (is_word("if")) {
        Nesting nesting(*this);
        s->else_body.push_back(if_statement());
      } else {
        s->else_body = block();
      }
    }
    return s;
  }

  StmtPtr pattern() {
    StmtPtr s = make(StmtKind::Pattern, next());
    const Token& name = expect_new_name("a pattern");
    s->name = name.text;
    s->name_location = name.location;
    expect_punct("(", "after the pattern's name (pattern NAME(a, b) { ... })");
    if (!accept_punct(")")) {
      do {
        s->parameters.push_back(expect_new_name("a pattern parameter").text);
      } while (accept_punct(","));
      expect_punct(")", "to close the pattern's parameters");
    }
    s->body = block();
    return s;
  }

  ActionForm action_form() {
    const Token& name = expect_name("an action or pattern");
    ActionForm form;
    form.kind_name = name.text;
    form.location = name.location;
    expect_punct("(", fmt::format("after '{}'", name.text).c_str());
    if (!accept_punct(")")) {
      do {
        form.args.push_back(expression());
      } while (accept_punct(","));
      expect_punct(")", "to close the arguments");
    }
    return form;
  }

  StmtPtr call_or_action() {
    StmtPtr s = make(StmtKind::Action, peek());
    s->actions.push_back(action_form());
    if (accept_punct("&")) s->actions.push_back(action_form());
    return s;
  }

  // ---- op and greedy ---------------------------------------------------------------------------
  Dependency dependency() {
    const Token& kind = expect_name("an action kind");
    Dependency dep;
    dep.kind_name = kind.text;
    dep.location = kind.location;
    if (!accept_punct("(")) return dep;
    if (accept_word("s")) {
      if (is_punct("+") || is_punct("-")) {
        const bool minus = next().text == "-";
        if (peek().kind != TokenKind::Integer || peek().integer > 1'000'000)
          fail(peek(), fmt::format("expected a stage offset, found {}", describe(peek())), "write s + 1 or s - 1");
        dep.stage_offset = static_cast<int>(minus ? -next().integer : next().integer);
      }
      if (accept_punct(",")) {
        expect_word("all", "after ',' in a dependency (F(s, all))");
        dep.all_microbatches = true;
      }
    } else if (accept_word("all")) {
      dep.all_microbatches = true;
    } else {
      fail(peek(), fmt::format("expected 's', 's + k', 's - k' or 'all', found {}", describe(peek())),
           "a dependency names a stage relative to the op's own stage s");
    }
    expect_punct(")", "to close the dependency");
    return dep;
  }

  StmtPtr op() {
    StmtPtr s = make(StmtKind::Op, next());
    const Token& name = expect_name("the operation's name");
    s->name = name.text;
    s->name_location = name.location;
    const Token& open = peek();
    expect_punct("{", "to open the operation's declaration");
    while (!accept_punct("}")) {
      if (at_end()) fail(open, "this '{' is never closed", "add '}' at the end of the op");
      while (accept_punct(";")) {}
      if (accept_punct("}")) break;
      const Token& field = expect_name("an op field (after, before, duration, memory, communicates, stagewide)");
      if (field.text == "after" || field.text == "before") {
        auto& deps = field.text == "after" ? s->op.after : s->op.before;
        do {
          deps.push_back(dependency());
        } while (accept_punct(","));
      } else if (field.text == "duration") {
        s->op.duration = expression();
      } else if (field.text == "memory") {
        s->op.memory = expression();
      } else if (field.text == "communicates") {
        s->op.communicates = true;
      } else if (field.text == "stagewide") {
        s->op.stagewide = true;
      } else {
        fail(field, fmt::format("unknown op field '{}'", field.text),
             "fields: after, before, duration, memory, communicates, stagewide");
      }
    }
    return s;
  }

  StmtPtr greedy() {
    StmtPtr s = make(StmtKind::Greedy, next());
    const Token& open = peek();
    expect_punct("{", "to open the greedy policy");
    while (!accept_punct("}")) {
      if (at_end()) fail(open, "this '{' is never closed", "add '}' at the end of the policy");
      while (accept_punct(";")) {}
      if (accept_punct("}")) break;
      const Token& field = expect_name("a policy field (prefer, time, inflight, cooldown)");
      if (field.text == "prefer") {
        do {
          const Token& kind = expect_name("an action kind, or `written`");
          s->greedy.prefer.push_back(kind.text);
          s->greedy.prefer_locations.push_back(kind.location);
        } while (accept_punct(","));
      } else if (field.text == "cooldown") {
        do {
          const Token& kind = expect_name("an action kind");
          s->greedy.cooldown.push_back(kind.text);
          s->greedy.cooldown_locations.push_back(kind.location);
        } while (accept_punct(","));
      } else if (field.text == "time") {
        do {
          const Token& kind = expect_name("an action kind");
          s->greedy.time.emplace_back(kind.text, expression());
          s->greedy.time_locations.push_back(kind.location);
        } while (accept_punct(","));
      } else if (field.text == "inflight") {
        s->greedy.inflight = expression();
      } else {
        fail(field, fmt::format("unknown policy field '{}'", field.text), "fields: prefer, time, inflight, cooldown");
      }
    }
    return s;
  }

  // ---- expressions ------------------------------------------------------------------------------
  ExprPtr node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->location = at.location;
    e->start = at.location;
    e->begin = at.begin;
    return e;
  }
  ExprPtr finish(ExprPtr e) {
    e->end = pos_ > 0 ? tokens_[pos_ - 1].end : 0;
    for (const ExprPtr& arg : e->args) e->height = std::max(e->height, arg->height + 1);
    if (e->height > kMaxExpressionHeight)
      throw SyntaxError{e->location, fmt::format("the expression is deeper than {} levels", kMaxExpressionHeight),
                        "each operator adds a level: split it with let (let a = ...; let b = a + ...)"};
    return e;
  }
  ExprPtr binary(Op op, ExprPtr lhs, ExprPtr rhs, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = ExprKind::Binary;
    e->op = op;
    e->location = at.location;
    e->start = lhs->start;
    e->begin = lhs->begin;
    e->args.push_back(std::move(lhs));
    e->args.push_back(std::move(rhs));
    return finish(std::move(e));
  }

  ExprPtr expression() {
    Nesting nesting(*this);
    ExprPtr condition = logical_or();
    if (!is_punct("?")) return condition;
    const Token& at = next();
    auto e = std::make_unique<Expr>();
    e->kind = ExprKind::Conditional;
    e->location = at.location;
    e->start = condition->start;
    e->begin = condition->begin;
    e->args.push_back(std::move(condition));
    e->args.push_back(expression());
    expect_punct(":", "in a conditional (c ? a : b)");
    e->args.push_back(expression());
    return finish(std::move(e));
  }

  ExprPtr logical_or() {
    ExprPtr lhs = logical_and();
    while (is_word("or")) {
      const Token& at = next();
      lhs = binary(Op::Or, std::move(lhs), logical_and(), at);
    }
    return lhs;
  }

  ExprPtr logical_and() {
    ExprPtr lhs = logical_not();
    while (is_word("and")) {
      const Token& at = next();
      lhs = binary(Op::And, std::move(lhs), logical_not(), at);
    }
    return lhs;
  }

  ExprPtr logical_not() {
    if (!is_word("not")) return comparison();
    Nesting nesting(*this);
    const Token& at = next();
    ExprPtr e = node(ExprKind::Unary, at);
    e->op = Op::Not;
    e->args.push_back(logical_not());
    return finish(std::move(e));
  }

  static bool comparison_op(const Token& t, Op& op) {
    if (t.kind != TokenKind::Punct) return false;
    static const std::pair<const char*, Op> ops[] = {{"==", Op::Eq}, {"!=", Op::Ne}, {"<", Op::Lt},
                                                     {"<=", Op::Le}, {">", Op::Gt},  {">=", Op::Ge}};
    for (const auto& [symbol, o] : ops)
      if (t.text == symbol) {
        op = o;
        return true;
      }
    return false;
  }

  ExprPtr comparison() {
    ExprPtr lhs = additive();
    Op op;
    if (!comparison_op(peek(), op)) return lhs;
    const Token& at = next();
    if (is_punct("=") && at.text != "=") fail(at, fmt::format("'{}=' is not an operator", at.text));
    lhs = binary(op, std::move(lhs), additive(), at);
    if (comparison_op(peek(), op)) fail(peek(), "comparisons do not chain", "write a < b and b < c");
    return lhs;
  }

  ExprPtr additive() {
    ExprPtr lhs = multiplicative();
    while (is_punct("+") || is_punct("-")) {
      const Token& at = next();
      lhs = binary(at.text == "+" ? Op::Add : Op::Sub, std::move(lhs), multiplicative(), at);
    }
    return lhs;
  }

  ExprPtr multiplicative() {
    ExprPtr lhs = unary();
    while (is_punct("*") || is_punct("/") || is_punct("%")) {
      const Token& at = next();
      const Op op = at.text == "*" ? Op::Mul : at.text == "/" ? Op::Div : Op::Mod;
      lhs = binary(op, std::move(lhs), unary(), at);
    }
    return lhs;
  }

  ExprPtr unary() {
    if (!is_punct("-")) return primary();
    Nesting nesting(*this);
    const Token& at = next();
    ExprPtr e = node(ExprKind::Unary, at);
    e->op = Op::Neg;
    e->args.push_back(unary());
    return finish(std::move(e));
  }

  ExprPtr primary() {
    const Token& t = peek();
    if (t.kind == TokenKind::Integer || t.kind == TokenKind::Real) {
      next();
      ExprPtr e = node(t.kind == TokenKind::Integer ? ExprKind::Integer : ExprKind::Real, t);
      e->integer = t.integer;
      e->real = t.real;
      return finish(std::move(e));
    }
    if (t.kind == TokenKind::Name) {
      next();
      ExprPtr e = node(ExprKind::Variable, t);
      e->name = t.text;
      if (accept_punct("[")) {
        e->kind = ExprKind::Index;
        e->args.push_back(expression());
        expect_punct("]", "to close the index");
      } else if (accept_punct("(")) {
        e->kind = ExprKind::Call;
        if (!accept_punct(")")) {
          do {
            e->args.push_back(expression());
          } while (accept_punct(","));
          expect_punct(")", "to close the arguments");
        }
      }
      return finish(std::move(e));
    }
    if (accept_punct("(")) {
      ExprPtr e = expression();
      expect_punct(")", "to close the parenthesis");
      return e;
    }
    if (accept_punct("[")) {
      ExprPtr e = node(ExprKind::List, t);
      if (!accept_punct("]")) {
        do {
          e->args.push_back(expression());
        } while (accept_punct(","));
        expect_punct("]", "to close the list");
      }
      return finish(std::move(e));
    }
    if (t.kind == TokenKind::String)
      fail(t, fmt::format("unexpected {}", describe(t)),
           "strings are only messages of `where`, the `name` and the `description`");
    fail(t, fmt::format("expected an expression, found {}", describe(t)));
  }

  const std::vector<Token>& tokens_;
  std::vector<LangDiagnostic>& diagnostics_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

bool is_reserved(const std::string& name) {
  static const std::set<std::string> reserved =
      {"param",  "where",    "name",   "description", "devices",   "microbatches", "padded",    "to",
       "stages", "placed",   "loop",   "vshape",      "pipelines", "route",        "let",       "for",
       "in",     "reversed", "repeat", "while",       "if",        "else",         "on",        "pattern",
       "op",     "after",    "before", "duration",    "memory",    "communicates", "stagewide", "all",
       "greedy", "prefer",   "time",   "inflight",    "written",   "cooldown",     "and",       "or",
       "not",    "count",    "min",    "max",         "abs",       "device",       "array",     "F",
       "B",      "I",        "W",      "R",           "OFFLOAD",   "RELOAD",       "OPT",       "SEND_F",
       "RECV_F", "SEND_B",   "RECV_B"};
  return reserved.count(name) > 0;
}

Program parse(const std::vector<Token>& tokens, std::vector<LangDiagnostic>& diagnostics) {
  return Parser(tokens, diagnostics).run();
}

}  // namespace flexpipe::lang
