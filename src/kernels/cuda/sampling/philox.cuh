#pragma once
// Philox4x32-10 counter-based generator (Salmon et al., SC'11): a pure function of (counter, key), so a request's
// random numbers depend only on its own seed and step, never on batch composition or launch shape.
#include <cstdint>

#if defined(__CUDACC__)
#define FATHOM_HOST_DEVICE __host__ __device__
#else
#define FATHOM_HOST_DEVICE
#endif

namespace fathom::kernels::cuda {

struct Philox4x32 {
  uint32_t v[4];
};

FATHOM_HOST_DEVICE inline void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

// counter: 128 bits; key: 64 bits. Ten rounds, the key bumped by the Weyl constants between rounds.
FATHOM_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kMultiplier0, counter.v[0], hi0, lo0);
    philox_mulhilo(kMultiplier1, counter.v[2], hi1, lo1);
    counter = Philox4x32{{hi1 ^ counter.v[1] ^ key0, lo1, hi0 ^ counter.v[3] ^ key1, lo0}};
  }
  return counter;
}

// 64 random bits for (seed, step, stream): key = seed, counter = (step, stream).
FATHOM_HOST_DEVICE inline uint64_t philox_random64(uint64_t seed, uint64_t step, uint64_t stream) {
  const Philox4x32 out = philox4x32_10(
      Philox4x32{{static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), static_cast<uint32_t>(stream),
                  static_cast<uint32_t>(stream >> 32)}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return (static_cast<uint64_t>(out.v[0]) << 32) | out.v[1];
}

}  // namespace fathom::kernels::cuda
