#pragma once
// The fixtures' golden logits (tools/fixtures/make_fixtures.py: transformers' logits and NextN MTP logits per
// sequence) and the relative L2 error the model tests bound.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/safetensors.h"

namespace fathom::testing {

struct GoldenSequence {
  std::vector<int32_t> ids;
  std::vector<float> logits;      // [T, V]
  std::vector<float> mtp_logits;  // [T-1, V]; empty when the fixture has no MTP module
};

// The sequences of `dir`/golden.safetensors (seq0, seq1, ...).
inline std::vector<GoldenSequence> read_golden(const std::string& dir) {
  auto file = model::SafetensorsFile::open(dir + "/golden.safetensors");
  std::vector<GoldenSequence> sequences;
  for (int i = 0; file->contains("seq" + std::to_string(i) + ".ids"); ++i) {
    const std::string prefix = "seq" + std::to_string(i) + ".";
    GoldenSequence s;
    const Tensor ids = file->tensor(prefix + "ids");
    for (int64_t t = 0; t < ids.numel(); ++t) s.ids.push_back(static_cast<int32_t>(ids.data<int64_t>()[t]));
    const Tensor logits = file->tensor(prefix + "logits");
    s.logits.assign(logits.data<float>(), logits.data<float>() + logits.numel());
    if (file->contains(prefix + "mtp_logits")) {
      const Tensor mtp = file->tensor(prefix + "mtp_logits");
      s.mtp_logits.assign(mtp.data<float>(), mtp.data<float>() + mtp.numel());
    }
    sequences.push_back(std::move(s));
  }
  return sequences;
}

// ||a - b|| / ||b||; infinite when a holds a non-finite value.
inline double relative_l2(const float* a, const float* b, size_t count) {
  double num = 0, den = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}
inline double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return relative_l2(a.data(), b.data(), std::min(a.size(), b.size()));
}

}  // namespace fathom::testing
