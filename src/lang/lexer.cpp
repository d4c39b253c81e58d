// The lexer: program text to tokens, with a diagnostic for every bad character or literal.
#include "lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::lang {

namespace {

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

class Lexer {
 public:
  Lexer(const SourceText& source, std::vector<LangDiagnostic>& diagnostics)
      : text_(source.text()), diagnostics_(diagnostics) {}

  std::vector<Token> run() {
    std::vector<Token> tokens;
    for (;;) {
      skip_space_and_comments();
      Token token;
      token.location = {line_, column()};
      token.begin = pos_;
      if (pos_ >= text_.size()) {
        token.end = pos_;
        tokens.push_back(std::move(token));
        return tokens;
      }
      if (lex_one(token)) {
        token.end = pos_;
        tokens.push_back(std::move(token));
      }
    }
  }

 private:
  int column() const { return static_cast<int>(pos_ - line_start_) + 1; }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  void skip_space_and_comments() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '\n') {
        ++pos_;
        ++line_;
        line_start_ = pos_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        return;
      }
    }
  }

  void error(SourceLocation at, std::string message, std::string hint = {}) {
    diagnostics_.push_back({at, std::move(message), std::move(hint)});
  }

  bool lex_one(Token& token) {
    const char c = peek();
    if (is_name_start(c)) {
      const size_t start = pos_;
      while (is_name_char(peek())) ++pos_;
      token.kind = TokenKind::Name;
      token.text = std::string(text_.substr(start, pos_ - start));
      return true;
    }
    if (is_digit(c)) return lex_number(token);
    if (c == '"') return lex_string(token);
    static constexpr std::string_view two[] = {"..", "+=", "-=", "<=", ">=", "==", "!="};
    for (std::string_view symbol : two) {
      if (text_.substr(pos_, 2) == symbol) {
        token.kind = TokenKind::Punct;
        token.text = std::string(symbol);
        pos_ += 2;
        return true;
      }
    }
    if (std::string_view("(){}[],;=+-*/%<>?:&").find(c) != std::string_view::npos) {
      token.kind = TokenKind::Punct;
      token.text = std::string(1, c);
      ++pos_;
      return true;
    }
    const SourceLocation at = token.location;
    ++pos_;
    if (c == '!') {
      error(at, "unexpected character '!'", "write `not x` for a logical not, `!=` for not equal");
    } else if (c == '|') {
      error(at, "unexpected character '|'", "write `or` for a logical or");
    } else if (std::isprint(static_cast<unsigned char>(c))) {
      error(at, fmt::format("unexpected character '{}'", c));
    } else {
      error(at, fmt::format("unexpected byte 0x{:02x}", static_cast<unsigned char>(c)));
    }
    return false;
  }

  bool lex_number(Token& token) {
    const size_t start = pos_;
    while (is_digit(peek())) ++pos_;
    bool real = false;
    // "0..p" is a range, not the real "0." followed by ".p".
    if (peek() == '.' && is_digit(peek(1))) {
      real = true;
      ++pos_;
      while (is_digit(peek())) ++pos_;
    }
    if ((peek() == 'e' || peek() == 'E') &&
        (is_digit(peek(1)) || ((peek(1) == '+' || peek(1) == '-') && is_digit(peek(2))))) {
      real = true;
      pos_ += 2;
      while (is_digit(peek())) ++pos_;
    }
    if (is_name_char(peek())) {
      while (is_name_char(peek())) ++pos_;
      error(token.location, fmt::format("malformed number '{}'", text_.substr(start, pos_ - start)),
            "a name cannot start with a digit");
      return false;
    }
    const std::string digits(text_.substr(start, pos_ - start));
    token.text = digits;
    errno = 0;
    if (real) {
      token.kind = TokenKind::Real;
      token.real = std::strtod(digits.c_str(), nullptr);
    } else {
      token.kind = TokenKind::Integer;
      token.integer = std::strtoll(digits.c_str(), nullptr, 10);
    }
    if (errno == ERANGE) {
      error(token.location, fmt::format("number {} is out of range", digits),
            "integers are 64-bit: at most 9223372036854775807");
      return false;
    }
    return true;
  }

  bool lex_string(Token& token) {
    ++pos_;
    std::string value;
    while (pos_ < text_.size() && text_[pos_] != '"' && text_[pos_] != '\n') {
      if (text_[pos_] == '\\' && (peek(1) == '"' || peek(1) == '\\')) ++pos_;
      value += text_[pos_++];
    }
    if (peek() != '"') {
      error(token.location, "unterminated string", "a string ends with \" on the same line");
      return false;
    }
    ++pos_;
    // A string reaches the schedule's JSON, whose writer stops at a byte that is not UTF-8, and the
    // terminal: what printable() would have to escape is refused here. The token stays, so that the
    // parser does not report its absence too.
    if (const std::string shown = printable(value, value.size()); shown != value)
      error(token.location, fmt::format("a string holds bytes that are not UTF-8 text: \"{}\"", printable(shown)),
            "write strings in UTF-8, without control characters");
    token.kind = TokenKind::String;
    token.text = std::move(value);
    return true;
  }

  std::string_view text_;
  std::vector<LangDiagnostic>& diagnostics_;
  size_t pos_ = 0, line_start_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(const SourceText& source, std::vector<LangDiagnostic>& diagnostics) {
  return Lexer(source, diagnostics).run();
}

}  // namespace flexpipe::lang
