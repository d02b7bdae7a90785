#include "chat/jinja_lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "chat/python_text.h"
#include "core/error.h"

namespace fathom::chat::jinja {

namespace {

bool is_tag_space(char c) { return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F); }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex_digit(char c) { return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }

// Jinja lexes with newlines normalised to \n and, without keep_trailing_newline, one final newline removed.
std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// True when `text` is non-empty and all Python whitespace (Jinja's `\s+` fullmatch).
bool all_python_space(std::string_view text) {
  if (text.empty()) return false;
  for (char32_t c : decode_utf8(text))
    if (!is_python_space(c)) return false;
  return true;
}

// Length of the run of Python whitespace at `text` (Jinja's `\s*`).
size_t python_space_run(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (!is_tag_space(static_cast<char>(c))) break;
      ++i;
      continue;
    }
    size_t width = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    std::u32string decoded = decode_utf8(text.substr(i, width));
    if (decoded.size() != 1 || !is_python_space(decoded[0])) break;
    i += width;
  }
  return i;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : source_(normalize_source(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < source_.size(); ++i)
      if (source_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < source_.size()) {
      size_t tag = find_tag_start(pos_);
      if (tag == std::string::npos) {
        emit_data(pos_, source_.substr(pos_));
        break;
      }
      char kind = source_[tag + 1];
      size_t after = tag + 2;
      char sign = after < source_.size() && (source_[after] == '-' || source_[after] == '+') ? source_[after] : 0;
      if (sign) ++after;
      std::string text = source_.substr(pos_, tag - pos_);
      if (sign == '-') {
        text = python_strip(text, StripSide::Right, std::nullopt);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop spaces/tabs between the line start and a block or comment tag.
        size_t line_pos = text.rfind('\n');
        line_pos = line_pos == std::string::npos ? 0 : line_pos + 1;
        if ((line_pos > 0 || line_starting) && all_python_space(std::string_view(text).substr(line_pos)))
          text.resize(line_pos);
      }
      emit_data(pos_, text);
      size_t end_of_tag;
      if (kind == '#') {
        end_of_tag = lex_comment(tag, after);
      } else if (kind == '%' && lex_raw(tag, after, &end_of_tag)) {
        // raw block already emitted as data
      } else {
        end_of_tag = lex_tag(tag, after, kind == '{');
      }
      line_starting = end_of_tag > 0 && source_[end_of_tag - 1] == '\n';
      pos_ = end_of_tag;
    }
    Token end;
    end.type = TokenType::End;
    end.location = location_of(source_.size());
    tokens_.push_back(end);
    return std::move(tokens_);
  }

 private:
  SourceLocation location_of(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line_index = static_cast<size_t>(it - line_starts_.begin()) - 1;
    size_t line_start = line_starts_[line_index];
    SourceLocation location;
    location.line = static_cast<int>(line_index) + 1;
    location.column = static_cast<int>(count_code_points(std::string_view(source_).substr(line_start, offset - line_start))) + 1;
    return location;
  }

  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    FATHOM_FAIL("chat template syntax error at " << describe_location(location_of(offset)) << ": " << message);
  }

  size_t find_tag_start(size_t from) const {
    for (size_t i = source_.find('{', from); i != std::string::npos; i = source_.find('{', i + 1)) {
      if (i + 1 < source_.size() && (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void emit_data(size_t offset, std::string text) {
    if (text.empty()) return;
    push(TokenType::Data, offset, std::move(text));
  }

  Token& push(TokenType type, size_t offset, std::string text) {
    Token token;
    token.type = type;
    token.text = std::move(text);
    token.location = location_of(offset);
    tokens_.push_back(std::move(token));
    return tokens_.back();
  }

  bool starts_with(size_t at, std::string_view text) const {
    return source_.compare(at, text.size(), text) == 0;
  }

  // Matches `-END\s*`, `+END` (blocks and comments only), or `END` plus one optional newline (trim_blocks
  // applies to block and comment ends, not to `}}`). Returns the end offset, or npos when nothing matches.
  size_t match_tag_end(size_t at, std::string_view end, bool trims_newline) const {
    if (starts_with(at, "-") && starts_with(at + 1, end)) {
      size_t stop = at + 1 + end.size();
      return stop + python_space_run(std::string_view(source_).substr(stop));
    }
    if (trims_newline && starts_with(at, "+") && starts_with(at + 1, end)) return at + 1 + end.size();
    if (starts_with(at, end)) {
      size_t stop = at + end.size();
      if (trims_newline && stop < source_.size() && source_[stop] == '\n') ++stop;
      return stop;
    }
    return std::string::npos;
  }

  size_t lex_comment(size_t tag, size_t after) {
    for (size_t at = after; at < source_.size(); ++at) {
      size_t end = match_tag_end(at, "#}", true);
      if (end != std::string::npos) return end;
    }
    fail(tag, "missing end of comment tag");
  }

  // `{% raw %}...{% endraw %}`: the body is emitted verbatim as data. Returns false when the tag is not raw.
  bool lex_raw(size_t tag, size_t after, size_t* end_of_tag) {
    size_t at = after + python_space_run(std::string_view(source_).substr(after));
    if (!starts_with(at, "raw")) return false;
    at += 3;
    at += python_space_run(std::string_view(source_).substr(at));
    size_t body_start;
    if (starts_with(at, "-%}")) {
      body_start = at + 3 + python_space_run(std::string_view(source_).substr(at + 3));
    } else if (starts_with(at, "%}")) {
      body_start = at + 2;  // Jinja applies no trim_blocks to the raw opening tag
    } else {
      return false;
    }
    for (size_t search = body_start; (search = source_.find("{%", search)) != std::string::npos; ++search) {
      size_t inner = search + 2;
      char sign = inner < source_.size() && (source_[inner] == '-' || source_[inner] == '+') ? source_[inner] : 0;
      if (sign) ++inner;
      inner += python_space_run(std::string_view(source_).substr(inner));
      if (!starts_with(inner, "endraw")) continue;
      inner += 6;
      inner += python_space_run(std::string_view(source_).substr(inner));
      size_t end = match_tag_end(inner, "%}", true);
      if (end == std::string::npos) continue;
      std::string body = source_.substr(body_start, search - body_start);
      if (sign == '-') {
        body = python_strip(body, StripSide::Right, std::nullopt);
      } else if (sign != '+') {
        bool line_starting = body_start > 0 && source_[body_start - 1] == '\n';
        size_t line_pos = body.rfind('\n');
        line_pos = line_pos == std::string::npos ? 0 : line_pos + 1;
        if ((line_pos > 0 || line_starting) && all_python_space(std::string_view(body).substr(line_pos)))
          body.resize(line_pos);
      }
      emit_data(body_start, body);
      *end_of_tag = end;
      return true;
    }
    fail(tag, "missing end of raw directive");
  }

  // Tokens of one `{{ ... }}` or `{% ... %}`; end markers count only while brackets are balanced.
  size_t lex_tag(size_t tag, size_t after, bool is_variable) {
    push(is_variable ? TokenType::VariableBegin : TokenType::BlockBegin, tag, "");
    std::string_view end_marker = is_variable ? "}}" : "%}";
    std::vector<char> brackets;
    size_t at = after;
    while (true) {
      if (at >= source_.size()) fail(tag, std::string("missing end of ") + (is_variable ? "expression '}}'" : "statement '%}'"));
      if (brackets.empty()) {
        size_t end = match_tag_end(at, end_marker, !is_variable);
        if (end != std::string::npos) {
          push(is_variable ? TokenType::VariableEnd : TokenType::BlockEnd, at, "");
          return end;
        }
      }
      char c = source_[at];
      if (is_tag_space(c)) {
        ++at;
      } else if (is_digit(c)) {
        at = lex_number(at);
      } else if (is_name_start(c)) {
        size_t start = at;
        while (at < source_.size() && is_name_char(source_[at])) ++at;
        push(TokenType::Name, start, source_.substr(start, at - start));
      } else if (c == '\'' || c == '"') {
        at = lex_string(at);
      } else {
        at = lex_operator(at, brackets);
      }
    }
  }

  size_t lex_number(size_t start) {
    auto scan_digits = [&](size_t at) {
      while (at < source_.size() && (is_digit(source_[at]) || (source_[at] == '_' && at + 1 < source_.size() && is_digit(source_[at + 1])))) ++at;
      return at;
    };
    size_t at = scan_digits(start);
    bool after_dot = start > 0 && source_[start - 1] == '.';  // `x.0.1` is two item lookups, not a float
    bool is_float = false;
    if (!after_dot && at + 1 < source_.size() && source_[at] == '.' && is_digit(source_[at + 1])) {
      at = scan_digits(at + 1);
      is_float = true;
    }
    if (!after_dot && at < source_.size() && (source_[at] == 'e' || source_[at] == 'E')) {
      size_t exponent = at + 1;
      if (exponent < source_.size() && (source_[exponent] == '+' || source_[exponent] == '-')) ++exponent;
      if (exponent < source_.size() && is_digit(source_[exponent])) {
        at = scan_digits(exponent);
        is_float = true;
      }
    }
    std::string spelling;
    for (size_t i = start; i < at; ++i)
      if (source_[i] != '_') spelling.push_back(source_[i]);
    if (is_float) {
      Token& token = push(TokenType::Float, start, spelling);
      token.floating = std::strtod(spelling.c_str(), nullptr);
      return at;
    }
    int base = 10;
    if (spelling == "0" && at < source_.size() && std::string_view("xXoObB").find(source_[at]) != std::string_view::npos) {
      base = (source_[at] | 0x20) == 'x' ? 16 : (source_[at] | 0x20) == 'o' ? 8 : 2;
      spelling.clear();
      ++at;
      while (at < source_.size() && (is_hex_digit(source_[at]) || source_[at] == '_')) {
        if (source_[at] != '_') spelling.push_back(source_[at]);
        ++at;
      }
    }
    Token& token = push(TokenType::Integer, start, spelling);
    auto result = std::from_chars(spelling.data(), spelling.data() + spelling.size(), token.integer, base);
    if (result.ec != std::errc() || result.ptr != spelling.data() + spelling.size())
      fail(start, "invalid integer literal '" + spelling + "'");
    return at;
  }

  // Python "unicode-escape" decoding of the literal body, as Jinja applies it.
  size_t lex_string(size_t start) {
    char quote = source_[start];
    std::string value;
    size_t at = start + 1;
    while (true) {
      if (at >= source_.size()) fail(start, "unterminated string literal");
      char c = source_[at];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++at;
        continue;
      }
      if (at + 1 >= source_.size()) fail(start, "unterminated string literal");
      char escaped = source_[at + 1];
      at += 2;
      switch (escaped) {
        case '\n': break;
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'a': value.push_back('\a'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'n': value.push_back('\n'); break;
        case 'r': value.push_back('\r'); break;
        case 't': value.push_back('\t'); break;
        case 'v': value.push_back('\v'); break;
        case 'x':
        case 'u':
        case 'U': {
          size_t digits = escaped == 'x' ? 2 : escaped == 'u' ? 4 : 8;
          if (at + digits > source_.size() ||
              !std::all_of(source_.begin() + static_cast<long>(at), source_.begin() + static_cast<long>(at + digits), is_hex_digit))
            fail(at - 2, std::string("truncated \\") + escaped + " escape in string literal");
          append_utf8(value, static_cast<char32_t>(std::strtoul(source_.substr(at, digits).c_str(), nullptr, 16)));
          at += digits;
          break;
        }
        default:
          if (escaped >= '0' && escaped <= '7') {
            unsigned code = static_cast<unsigned>(escaped - '0');
            for (int k = 0; k < 2 && at < source_.size() && source_[at] >= '0' && source_[at] <= '7'; ++k, ++at)
              code = code * 8 + static_cast<unsigned>(source_[at] - '0');
            append_utf8(value, code);
          } else if (escaped == 'N') {
            fail(at - 2, "\\N{...} escapes are not supported");
          } else {
            value.push_back('\\');  // unknown escapes stay literal, as in Python
            value.push_back(escaped);
          }
      }
    }
    push(TokenType::String, start, std::move(value));
    return at + 1;
  }

  size_t lex_operator(size_t at, std::vector<char>& brackets) {
    static constexpr std::string_view kTwoCharOperators[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwoCharOperators) {
      if (starts_with(at, op)) {
        push(TokenType::Operator, at, std::string(op));
        return at + 2;
      }
    }
    char c = source_[at];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
      fail(at, std::string("unexpected character '") + c + "'");
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) fail(at, std::string("unexpected '") + c + "'");
      if (brackets.back() != c) fail(at, std::string("unexpected '") + c + "', expected '" + brackets.back() + "'");
      brackets.pop_back();
    }
    push(TokenType::Operator, at, std::string(1, c));
    return at + 1;
  }

  std::string source_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<Token> tokenize_template(std::string_view source) { return Lexer(source).run(); }

std::string describe_location(const SourceLocation& location) {
  return "line " + std::to_string(location.line) + ", column " + std::to_string(location.column);
}

}  // namespace fathom::chat::jinja
