#pragma once
// Element types of checkpoint tensors and scalar conversions between them and float.
#include <array>
#include <cstddef>
#include <limits>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace fathom {

enum class DType : uint8_t { F32, BF16, F16, F8_E4M3, I64, I32, U8, BOOL };

size_t dtype_size_bytes(DType dtype);
std::string_view dtype_name(DType dtype);           // safetensors spelling: "F32", "F8_E4M3", ...
bool dtype_from_name(std::string_view name, DType* out);

inline float bf16_to_float(uint16_t bits) {
  uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

// Round to nearest even, NaN preserved (torch's float -> bfloat16 cast).
inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float f16_to_float(uint16_t bits);
uint16_t float_to_f16(float value);

// OCP FP8 E4M3 ("e4m3fn"): no infinities, max finite 448, 0x7f/0xff are NaN.
namespace detail {
constexpr float fp8_e4m3_decode(uint8_t bits) {
  int exponent = (bits >> 3) & 0xf;
  int mantissa = bits & 0x7;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<float>::quiet_NaN();
  // normal: (8+m) * 2^(e-10); subnormal (e == 0): m * 2^-9
  float magnitude = static_cast<float>(exponent == 0 ? mantissa : 8 + mantissa);
  int power = exponent == 0 ? -9 : exponent - 10;
  for (; power > 0; --power) magnitude *= 2.0f;
  for (; power < 0; ++power) magnitude *= 0.5f;
  return (bits & 0x80) ? -magnitude : magnitude;
}
constexpr std::array<float, 256> make_fp8_e4m3_table() {
  std::array<float, 256> table{};
  for (int i = 0; i < 256; ++i) table[i] = fp8_e4m3_decode(static_cast<uint8_t>(i));
  return table;
}
}  // namespace detail
inline constexpr std::array<float, 256> kFp8E4M3ToFloat = detail::make_fp8_e4m3_table();
inline float fp8_e4m3_to_float(uint8_t bits) { return kFp8E4M3ToFloat[bits]; }
// Round to nearest even; |value| > 448 saturates to +-448 (callers scale into range first); NaN -> NaN.
uint8_t float_to_fp8_e4m3(float value);
constexpr float kFp8E4M3Max = 448.0f;

}  // namespace fathom
