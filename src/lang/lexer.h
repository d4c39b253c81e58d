// The schedule language's lexer: program text to tokens (internal).
#pragma once
// Internal to the schedule language: the tokens of a program.
#include <cstdint>
#include <string>
#include <vector>

#include "source.h"

namespace flexpipe::lang {

enum class TokenKind : uint8_t {
  Name,
  Integer,
  Real,
  String,
  Punct,  // ( ) { } [ ] , ; = += -= + - * / % < <= > >= == != ? : & ..
  End,
};

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;  // Name: the name; String: the unescaped value; Punct: the symbol
  int64_t integer = 0;
  double real = 0;
  SourceLocation location;
  size_t begin = 0, end = 0;  // byte range in the source
};

// Always ends with an End token. Bad characters, unterminated strings and literals out of range
// become diagnostics, and lexing goes on.
std::vector<Token> tokenize(const SourceText& source, std::vector<LangDiagnostic>& diagnostics);

}  // namespace flexpipe::lang
