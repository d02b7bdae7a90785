#include "core/dtype.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace fathom {
namespace {

TEST(Fp8E4M3, DecodesKnownCodes) {
  EXPECT_EQ(fp8_e4m3_to_float(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);       // exponent 7 = bias, mantissa 0
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);     // max finite
  EXPECT_EQ(fp8_e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xff)));
}

TEST(Fp8E4M3, EveryFiniteCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    const float value = fp8_e4m3_to_float(static_cast<uint8_t>(code));
    const uint8_t back = float_to_fp8_e4m3(value);
    if (value == 0.0f) {
      EXPECT_EQ(back & 0x7f, 0) << code;
    } else {
      EXPECT_EQ(back, code) << "value " << value;
    }
  }
}

TEST(Fp8E4M3, RoundsToNearestEvenAndSaturates) {
  // Between 1.0 (0x38) and 1.125 (0x39): the midpoint goes to the even code 0x38, above it to 0x39.
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);
  EXPECT_EQ(float_to_fp8_e4m3(1.07f), 0x39);
  // Between 1.125 (0x39) and 1.25 (0x3a): the midpoint goes to the even code 0x3a.
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3a);
  EXPECT_EQ(float_to_fp8_e4m3(1000.0f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-1000.0f), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(NAN), 0x7f);
}

TEST(Fp8E4M3, NearestOnRandomValues) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-460.0f, 460.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = dist(rng) * (i % 3 == 0 ? 0.001f : 1.0f);
    const float q = fp8_e4m3_to_float(float_to_fp8_e4m3(x));
    // No finite code is strictly closer than the chosen one.
    for (int code = 0; code < 256; ++code) {
      if ((code & 0x7f) == 0x7f) continue;
      const float other = fp8_e4m3_to_float(static_cast<uint8_t>(code));
      if (std::fabs(x) <= 448.0f) ASSERT_LE(std::fabs(q - x), std::fabs(other - x)) << x;
    }
  }
}

TEST(Bf16, RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), float_to_bf16(1.0f));  // tie -> even
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -9))), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(F16, RoundTrip) {
  for (float value : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f, 0.1f}) {
    const float back = f16_to_float(float_to_f16(value));
    EXPECT_NEAR(back, value, std::fabs(value) * 1e-3f) << value;
  }
  EXPECT_TRUE(std::isinf(f16_to_float(float_to_f16(1e6f))));
  for (int bits = 0; bits < 0x7c00; bits += 7) EXPECT_EQ(float_to_f16(f16_to_float(static_cast<uint16_t>(bits))), bits);
}

TEST(DType, NamesRoundTrip) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3, DType::I64, DType::I32, DType::U8, DType::BOOL}) {
    DType parsed;
    ASSERT_TRUE(dtype_from_name(dtype_name(dtype), &parsed));
    EXPECT_EQ(parsed, dtype);
  }
  DType parsed;
  EXPECT_FALSE(dtype_from_name("F8_E5M2", &parsed));
}

}  // namespace
}  // namespace fathom
