#pragma once
// Splits template source into data and tag tokens with Jinja's whitespace rules as transformers configures them
// (trim_blocks, lstrip_blocks, `-`/`+` markers, newline normalisation, one trailing newline dropped), and
// tokenizes the expressions inside tags.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fathom::chat::jinja {

struct SourceLocation {
  int line = 1;
  int column = 1;  // 1-based, in code points
};

enum class TokenType { Data, VariableBegin, VariableEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Operator, End };

struct Token {
  TokenType type = TokenType::End;
  std::string text;  // data text, name, decoded string literal, or operator spelling
  int64_t integer = 0;
  double floating = 0.0;
  SourceLocation location;
};

// Throws fathom::Error naming line and column for malformed tags, strings or unbalanced brackets.
std::vector<Token> tokenize_template(std::string_view source);

// "line L, column C" for error messages.
std::string describe_location(const SourceLocation& location);

}  // namespace fathom::chat::jinja
