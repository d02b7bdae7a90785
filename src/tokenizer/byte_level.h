#pragma once
// GPT-2's reversible byte <-> printable-character alphabet used by ByteLevel pre-tokenizer and decoder.
#include <cstdint>
#include <string>
#include <string_view>

namespace fathom::tokenizer::byte_level {

char32_t byte_to_code_point(uint8_t byte);
// -1 when the code point is not one of the 256 alphabet characters.
int code_point_to_byte(char32_t code_point);

// "Hello world" -> "HelloĠworld".
std::string bytes_to_token(std::string_view bytes);
// Inverse of bytes_to_token; a token containing any non-alphabet character is returned unchanged
// (HF ByteLevel decoder's fallback for e.g. added tokens).
std::string token_to_bytes(std::string_view token);

}  // namespace fathom::tokenizer::byte_level
