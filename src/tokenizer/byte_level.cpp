#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace fathom::tokenizer::byte_level {

namespace {
constexpr bool is_printable_as_itself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

// Printable bytes map to themselves; the other 68 map, in byte order, to U+0100.. upwards.
constexpr std::array<char32_t, 256> make_byte_table() {
  std::array<char32_t, 256> table{};
  char32_t next_extra = 256;
  for (int byte = 0; byte < 256; ++byte) table[byte] = is_printable_as_itself(byte) ? char32_t(byte) : next_extra++;
  return table;
}
constexpr std::array<char32_t, 256> kByteToCodePoint = make_byte_table();

constexpr std::array<int16_t, 324> make_reverse_table() {
  std::array<int16_t, 324> table{};
  for (auto& entry : table) entry = -1;
  for (int byte = 0; byte < 256; ++byte) table[kByteToCodePoint[byte]] = static_cast<int16_t>(byte);
  return table;
}
constexpr std::array<int16_t, 324> kCodePointToByte = make_reverse_table();
}  // namespace

char32_t byte_to_code_point(uint8_t byte) { return kByteToCodePoint[byte]; }

int code_point_to_byte(char32_t code_point) {
  return code_point < kCodePointToByte.size() ? kCodePointToByte[code_point] : -1;
}

std::string bytes_to_token(std::string_view bytes) {
  std::string token;
  token.reserve(bytes.size() * 2);
  for (char byte : bytes) utf8::append_code_point(token, kByteToCodePoint[static_cast<uint8_t>(byte)]);
  return token;
}

std::string token_to_bytes(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    int byte = code_point_to_byte(utf8::decode_next(token, pos));
    if (byte < 0) return std::string(token);
    bytes.push_back(static_cast<char>(byte));
  }
  return bytes;
}

}  // namespace fathom::tokenizer::byte_level
