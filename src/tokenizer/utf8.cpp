#include "tokenizer/utf8.h"

#include <cstring>

namespace fathom::tokenizer::utf8 {

int classify(const unsigned char* p, size_t available) {
  const unsigned char lead = p[0];
  if (lead < 0x80) return 1;
  int continuation_count;
  unsigned char low = 0x80, high = 0xBF;  // allowed range of the first continuation byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    continuation_count = 1;
  } else if (lead == 0xE0) {
    continuation_count = 2, low = 0xA0;
  } else if (lead >= 0xE1 && lead <= 0xEC) {
    continuation_count = 2;
  } else if (lead == 0xED) {
    continuation_count = 2, high = 0x9F;
  } else if (lead == 0xEE || lead == 0xEF) {
    continuation_count = 2;
  } else if (lead == 0xF0) {
    continuation_count = 3, low = 0x90;
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    continuation_count = 3;
  } else if (lead == 0xF4) {
    continuation_count = 3, high = 0x8F;
  } else {
    return -1;
  }
  for (int i = 1; i <= continuation_count; ++i) {
    if (static_cast<size_t>(i) >= available) return 0;
    if (p[i] < low || p[i] > high) return -i;
    low = 0x80, high = 0xBF;
  }
  return continuation_count + 1;
}

namespace {
// Length of the leading all-ASCII run, eight bytes at a time.
size_t ascii_prefix_length(const unsigned char* p, size_t size) {
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, sizeof(word));
    if (word & 0x8080808080808080ull) break;
  }
  while (i < size && p[i] < 0x80) ++i;
  return i;
}
}  // namespace

bool is_valid(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  while (i < bytes.size()) {
    i += ascii_prefix_length(p + i, bytes.size() - i);
    if (i >= bytes.size()) break;
    int length = classify(p + i, bytes.size() - i);
    if (length <= 0) return false;
    i += static_cast<size_t>(length);
  }
  return true;
}

size_t append_lossy(std::string_view bytes, std::string& out, bool final) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  size_t valid_run_start = 0;
  while (i < bytes.size()) {
    i += ascii_prefix_length(p + i, bytes.size() - i);
    if (i >= bytes.size()) break;
    int length = classify(p + i, bytes.size() - i);
    if (length > 0) {
      i += static_cast<size_t>(length);
      continue;
    }
    out.append(bytes.data() + valid_run_start, i - valid_run_start);
    if (length == 0) {
      // Truncated sequence at the very end: hold it back unless nothing more can come.
      if (!final) return i;
      out.append(kReplacementCharacter);
      return bytes.size();
    }
    out.append(kReplacementCharacter);
    i += static_cast<size_t>(-length);
    valid_run_start = i;
  }
  out.append(bytes.data() + valid_run_start, bytes.size() - valid_run_start);
  return bytes.size();
}

std::string to_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + 8);
  append_lossy(bytes, out, true);
  return out;
}

char32_t decode_next(std::string_view text, size_t& pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  unsigned char lead = p[pos];
  if (lead < 0x80) {
    ++pos;
    return lead;
  }
  if (lead < 0xE0) {
    char32_t cp = (char32_t(lead & 0x1F) << 6) | (p[pos + 1] & 0x3F);
    pos += 2;
    return cp;
  }
  if (lead < 0xF0) {
    char32_t cp = (char32_t(lead & 0x0F) << 12) | (char32_t(p[pos + 1] & 0x3F) << 6) | (p[pos + 2] & 0x3F);
    pos += 3;
    return cp;
  }
  char32_t cp = (char32_t(lead & 0x07) << 18) | (char32_t(p[pos + 1] & 0x3F) << 12) |
                (char32_t(p[pos + 2] & 0x3F) << 6) | (p[pos + 3] & 0x3F);
  pos += 4;
  return cp;
}

char32_t decode_before(std::string_view text, size_t end, size_t* start) {
  size_t begin = end - 1;
  while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  *start = begin;
  size_t pos = begin;
  return decode_next(text, pos);
}

void append_code_point(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace fathom::tokenizer::utf8
