#include "core/dtype.h"

#include <array>
#include <cmath>

namespace fathom {

size_t dtype_size_bytes(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::F8_E4M3: return 1;
    case DType::I64: return 8;
    case DType::I32: return 4;
    case DType::U8: return 1;
    case DType::BOOL: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
  }
  return "?";
}

bool dtype_from_name(std::string_view name, DType* out) {
  static constexpr std::array<DType, 8> kAll = {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3,
                                                DType::I64, DType::I32,  DType::U8,  DType::BOOL};
  for (DType dtype : kAll) {
    if (dtype_name(dtype) == name) {
      *out = dtype;
      return true;
    }
  }
  return false;
}

float f16_to_float(uint16_t bits) {
  uint32_t sign = (bits >> 15) & 1u;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return sign ? -magnitude : magnitude;
}

uint16_t float_to_f16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  uint32_t sign = (bits >> 16) & 0x8000u;
  float magnitude = std::fabs(value);
  if (std::isnan(value)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (magnitude >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude < std::ldexp(1.0f, -14)) {
    // Subnormal: units of 2^-24, round half to even via nearbyint.
    float units = std::nearbyint(magnitude * std::ldexp(1.0f, 24));
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(units));
  }
  int exponent;
  float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent, fraction in [0.5,1)
  float mantissa_units = std::nearbyint(fraction * 2048.0f);  // 11 significant bits
  if (mantissa_units >= 2048.0f) {
    mantissa_units /= 2.0f;
    exponent += 1;
  }
  uint32_t biased = static_cast<uint32_t>(exponent - 1 + 15);
  if (biased >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  return static_cast<uint16_t>(sign | (biased << 10) | (static_cast<uint32_t>(mantissa_units) & 0x3ffu));
}

uint8_t float_to_fp8_e4m3(float value) {
  if (std::isnan(value)) return 0x7f;
  uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  float magnitude = std::fabs(value);
  if (magnitude >= kFp8E4M3Max) return static_cast<uint8_t>(sign | 0x7e);
  // Binary search over the 127 non-negative finite codes (monotone in magnitude), then round to nearest even.
  int low = 0, high = 0x7e;
  while (low < high) {
    int mid = (low + high + 1) / 2;
    if (kFp8E4M3ToFloat[mid] <= magnitude) low = mid; else high = mid - 1;
  }
  int below = low;
  if (kFp8E4M3ToFloat[below] == magnitude || below == 0x7e) return static_cast<uint8_t>(sign | below);
  int above = below + 1;
  float distance_below = magnitude - kFp8E4M3ToFloat[below];
  float distance_above = kFp8E4M3ToFloat[above] - magnitude;
  int chosen;
  if (distance_below < distance_above) chosen = below;
  else if (distance_above < distance_below) chosen = above;
  else chosen = (below % 2 == 0) ? below : above;
  return static_cast<uint8_t>(sign | chosen);
}

}  // namespace fathom
