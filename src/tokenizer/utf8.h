#pragma once
// UTF-8 scanning shared by encode (input repair) and decode (lossy output, streaming).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fathom::tokenizer::utf8 {

// Classifies the bytes at p[0..available): > 0 is the length of a complete well-formed sequence;
// 0 means a well-formed but truncated prefix; < 0 is minus the length of the maximal invalid
// subpart (Unicode "U+FFFD substitution of maximal subparts", as Rust from_utf8_lossy and Python
// errors='replace' do).
int classify(const unsigned char* p, size_t available);

bool is_valid(std::string_view bytes);

// Appends `bytes` to `out` with every maximal invalid subpart replaced by U+FFFD. When `final` is
// false a trailing truncated-but-well-formed sequence is left unconsumed (it may complete later).
// Returns the number of bytes consumed.
size_t append_lossy(std::string_view bytes, std::string& out, bool final);

std::string to_lossy(std::string_view bytes);

// Decodes the code point at text[pos] (text must be valid UTF-8) and advances pos past it.
char32_t decode_next(std::string_view text, size_t& pos);

// Decodes the code point that ends at text[end) (text must be valid UTF-8); sets *start to its first byte.
char32_t decode_before(std::string_view text, size_t end, size_t* start);

void append_code_point(std::string& out, char32_t code_point);

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

}  // namespace fathom::tokenizer::utf8
