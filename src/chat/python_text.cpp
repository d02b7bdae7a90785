#include "chat/python_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace fathom::chat::jinja {

namespace {

constexpr char32_t kReplacementCharacter = 0xFFFD;

bool is_line_boundary(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

// Python's str.isprintable() is false for these (approximation of categories Cc, Cf, Zs, Zl, Zp, Co, Cs).
bool is_python_unprintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0)) return true;
  if (c == 0xAD || c == 0x1680 || c == 0x180E || c == 0x3000 || c == 0xFEFF || c == 0x061C || c == 0x06DD) return true;
  if (c >= 0x0600 && c <= 0x0605) return true;
  if (c >= 0x2000 && c <= 0x200F) return true;
  if (c >= 0x2028 && c <= 0x202F) return true;
  if (c >= 0x205F && c <= 0x206F) return true;
  if (c >= 0xD800 && c <= 0xF8FF) return true;
  if (c >= 0xFFF9 && c <= 0xFFFB) return true;
  if (c >= 0xE0000 && c <= 0xE007F) return true;
  if (c >= 0xF0000) return true;
  return false;
}

std::u32string strip_set(const std::optional<std::string>& chars) {
  return chars ? decode_utf8(*chars) : std::u32string();
}

}  // namespace

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    unsigned char lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      out.push_back(lead);
      ++i;
      continue;
    }
    int extra = lead >= 0xF0 && lead < 0xF8 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC2 && lead < 0xE0 ? 1 : -1;
    if (extra < 0 || i + static_cast<size_t>(extra) >= text.size()) {
      out.push_back(kReplacementCharacter);
      ++i;
      continue;
    }
    char32_t code_point = lead & (0x3F >> extra);
    bool valid = true;
    for (int k = 1; k <= extra; ++k) {
      unsigned char next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) {
        valid = false;
        break;
      }
      code_point = (code_point << 6) | (next & 0x3F);
    }
    if (!valid) {
      out.push_back(kReplacementCharacter);
      ++i;
      continue;
    }
    out.push_back(code_point);
    i += static_cast<size_t>(extra) + 1;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) append_utf8(out, c);
  return out;
}

size_t count_code_points(std::string_view text) {
  if (is_ascii(text)) return text.size();
  return decode_utf8(text).size();
}

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

std::string python_strip(std::string_view text, StripSide side, const std::optional<std::string>& chars) {
  std::u32string code_points = decode_utf8(text);
  std::u32string set = strip_set(chars);
  auto strippable = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : is_python_space(c);
  };
  size_t begin = 0, end = code_points.size();
  if (side != StripSide::Right)
    while (begin < end && strippable(code_points[begin])) ++begin;
  if (side != StripSide::Left)
    while (end > begin && strippable(code_points[end - 1])) --end;
  return encode_utf8(std::u32string_view(code_points).substr(begin, end - begin));
}

std::vector<std::string> python_split(std::string_view text, const std::optional<std::string>& separator,
                                      int64_t max_split) {
  std::vector<std::string> parts;
  if (separator) {
    size_t start = 0;
    while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
      size_t found = text.find(*separator, start);
      if (found == std::string_view::npos) break;
      parts.emplace_back(text.substr(start, found - start));
      start = found + separator->size();
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  std::u32string code_points = decode_utf8(text);
  size_t i = 0, n = code_points.size();
  while (true) {
    while (i < n && is_python_space(code_points[i])) ++i;
    if (i >= n) break;
    if (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split) {
      parts.push_back(encode_utf8(std::u32string_view(code_points).substr(i)));
      break;
    }
    size_t start = i;
    while (i < n && !is_python_space(code_points[i])) ++i;
    parts.push_back(encode_utf8(std::u32string_view(code_points).substr(start, i - start)));
  }
  return parts;
}

std::vector<std::string> python_rsplit(std::string_view text, const std::optional<std::string>& separator,
                                       int64_t max_split) {
  std::vector<std::string> parts;
  if (separator) {
    size_t end = text.size();
    while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
      if (end < separator->size()) break;
      size_t found = text.rfind(*separator, end - separator->size());
      if (found == std::string_view::npos) break;
      parts.emplace_back(text.substr(found + separator->size(), end - found - separator->size()));
      end = found;
    }
    parts.emplace_back(text.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  std::u32string code_points = decode_utf8(text);
  size_t i = code_points.size();
  while (true) {
    while (i > 0 && is_python_space(code_points[i - 1])) --i;
    if (i == 0) break;
    if (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split) {
      parts.push_back(encode_utf8(std::u32string_view(code_points).substr(0, i)));
      break;
    }
    size_t end = i;
    while (i > 0 && !is_python_space(code_points[i - 1])) --i;
    parts.push_back(encode_utf8(std::u32string_view(code_points).substr(i, end - i)));
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> python_splitlines(std::string_view text) {
  std::u32string code_points = decode_utf8(text);
  std::vector<std::string> lines;
  size_t start = 0, i = 0, n = code_points.size();
  while (i < n) {
    if (!is_line_boundary(code_points[i])) {
      ++i;
      continue;
    }
    lines.push_back(encode_utf8(std::u32string_view(code_points).substr(start, i - start)));
    i += (code_points[i] == '\r' && i + 1 < n && code_points[i + 1] == '\n') ? 2 : 1;
    start = i;
  }
  if (start < n) lines.push_back(encode_utf8(std::u32string_view(code_points).substr(start)));
  return lines;
}

std::string python_replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                           int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts the replacement before every code point and at the end.
    std::u32string code_points = decode_utf8(text);
    int64_t done = 0;
    for (char32_t c : code_points) {
      if (count < 0 || done < count) {
        out.append(new_text);
        ++done;
      }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out.append(new_text);
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t found = text.find(old_text, start);
    if (found == std::string_view::npos) break;
    out.append(text.substr(start, found - start));
    out.append(new_text);
    start = found + old_text.size();
    ++done;
  }
  out.append(text.substr(start));
  return out;
}

std::string ascii_upper(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

std::string ascii_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string python_capitalize(std::string_view text) {
  std::string out = ascii_lower(text);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

std::string jinja_title(std::string_view text) {
  auto is_word_separator = [](char c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' || (c >= 0x09 && c <= 0x0D);
  };
  std::string out;
  out.reserve(text.size());
  bool at_word_start = true;
  for (char c : text) {
    if (is_word_separator(c)) {
      out.push_back(c);
      at_word_start = true;
      continue;
    }
    std::string piece(1, c);
    out += at_word_start ? ascii_upper(piece) : ascii_lower(piece);
    at_word_start = false;
  }
  return out;
}

std::string python_string_repr(std::string_view text) {
  bool has_single = text.find('\'') != std::string_view::npos;
  bool has_double = text.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  char buffer[16];
  for (char32_t c : decode_utf8(text)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == ' ' || !is_python_unprintable(c)) {
      append_utf8(out, c);
    } else if (c <= 0xFF) {
      std::snprintf(buffer, sizeof(buffer), "\\x%02x", static_cast<unsigned>(c));
      out += buffer;
    } else if (c <= 0xFFFF) {
      std::snprintf(buffer, sizeof(buffer), "\\u%04x", static_cast<unsigned>(c));
      out += buffer;
    } else {
      std::snprintf(buffer, sizeof(buffer), "\\U%08x", static_cast<unsigned>(c));
      out += buffer;
    }
  }
  out.push_back(quote);
  return out;
}

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  std::string sign = std::signbit(value) ? "-" : "";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), std::fabs(value), std::chars_format::scientific);
  std::string scientific(buffer, result.ptr);
  size_t e_pos = scientific.find('e');
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i)
    if (scientific[i] != '.') digits.push_back(scientific[i]);
  int exponent = std::stoi(scientific.substr(e_pos + 1));
  int decimal_point = exponent + 1;  // digits d1d2... mean 0.d1d2... * 10^decimal_point
  int digit_count = static_cast<int>(digits.size());
  if (decimal_point <= -4 || decimal_point > 16) {
    std::string mantissa = digits.substr(0, 1);
    if (digit_count > 1) mantissa += "." + digits.substr(1);
    std::snprintf(buffer, sizeof(buffer), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return sign + mantissa + buffer;
  }
  if (decimal_point <= 0) return sign + "0." + std::string(static_cast<size_t>(-decimal_point), '0') + digits;
  if (decimal_point >= digit_count)
    return sign + digits + std::string(static_cast<size_t>(decimal_point - digit_count), '0') + ".0";
  return sign + digits.substr(0, static_cast<size_t>(decimal_point)) + "." +
         digits.substr(static_cast<size_t>(decimal_point));
}

}  // namespace fathom::chat::jinja
