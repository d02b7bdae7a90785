#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): a counter-based generator, so the
// random numbers of (seed, step) do not depend on how many other numbers were drawn before or elsewhere.
#include <array>
#include <cstdint>

namespace fathom::sampling {

using PhiloxBlock = std::array<uint32_t, 4>;

// Ten rounds of Philox over `counter` keyed by `key`.
constexpr PhiloxBlock philox4x32_10(PhiloxBlock counter, std::array<uint32_t, 2> key) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t product0 = static_cast<uint64_t>(kMultiplier0) * counter[0];
    const uint64_t product1 = static_cast<uint64_t>(kMultiplier1) * counter[2];
    counter = {static_cast<uint32_t>(product1 >> 32) ^ counter[1] ^ key[0], static_cast<uint32_t>(product1),
               static_cast<uint32_t>(product0 >> 32) ^ counter[3] ^ key[1], static_cast<uint32_t>(product0)};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

// Uniform double in [0, 1) for draw `index` of step `step` of the stream `seed` (53 random bits).
inline double philox_uniform(uint64_t seed, uint64_t step, uint32_t index = 0) {
  const PhiloxBlock bits = philox4x32_10(
      {static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), index, 0u},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const uint64_t mantissa = ((static_cast<uint64_t>(bits[0]) << 32) | bits[1]) >> 11;
  return static_cast<double>(mantissa) * (1.0 / 9007199254740992.0);  // 2^-53
}

// SplitMix64 finalizer: spreads an engine seed and a counter into a well-mixed 64-bit request seed.
constexpr uint64_t splitmix64(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

}  // namespace fathom::sampling
