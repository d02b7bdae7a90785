#include "kernels/cpu/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include <gtest/gtest.h>

namespace fathom::kernels::cpu {
namespace {

// Independent reference: rank groups and experts with full sorts in double.
void reference_route(const std::vector<float>& logits, const std::vector<float>& bias, const MoeRoutingParams& p,
                     std::vector<int32_t>* ids, std::vector<double>* weights) {
  const int64_t group_size = p.num_experts / p.num_groups;
  std::vector<double> score(p.num_experts), choice(p.num_experts);
  for (int64_t e = 0; e < p.num_experts; ++e) {
    score[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
    choice[e] = score[e] + bias[e];
  }
  std::vector<std::pair<double, int>> groups;
  for (int64_t g = 0; g < p.num_groups; ++g) {
    std::vector<double> members(choice.begin() + g * group_size, choice.begin() + (g + 1) * group_size);
    std::sort(members.rbegin(), members.rend());
    groups.push_back({-(members[0] + (group_size > 1 ? members[1] : 0.0)), static_cast<int>(g)});
  }
  std::sort(groups.begin(), groups.end());
  std::set<int> kept;
  for (int64_t i = 0; i < p.top_groups; ++i) kept.insert(groups[i].second);
  std::vector<std::pair<double, int>> candidates;
  for (int64_t e = 0; e < p.num_experts; ++e)
    if (kept.count(static_cast<int>(e / group_size))) candidates.push_back({-choice[e], static_cast<int>(e)});
  std::sort(candidates.begin(), candidates.end());
  double sum = 0;
  ids->clear();
  weights->clear();
  for (int64_t i = 0; i < p.top_k; ++i) {
    ids->push_back(candidates[i].second);
    weights->push_back(score[candidates[i].second]);
    sum += score[candidates[i].second];
  }
  for (double& w : *weights) w = (p.normalize ? w / (sum + 1e-20) : w) * p.routed_scaling_factor;
}

struct Case { int64_t experts, groups, top_groups, top_k; bool normalize; };

class RoutingSweep : public ::testing::TestWithParam<Case> {};

TEST_P(RoutingSweep, MatchesSortingReference) {
  const Case c = GetParam();
  MoeRoutingParams p{c.experts, c.groups, c.top_groups, c.top_k, c.normalize, 2.5f};
  std::mt19937 rng(static_cast<uint32_t>(c.experts * 31 + c.top_k));
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::uniform_real_distribution<float> bias_dist(-0.2f, 0.3f);  // negative bias too: dropped groups are -inf, not 0
  const int64_t tokens = 40;
  std::vector<float> logits(static_cast<size_t>(tokens * c.experts)), bias(static_cast<size_t>(c.experts));
  for (float& v : logits) v = dist(rng);
  for (float& v : bias) v = bias_dist(rng);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * c.top_k), -1);
  std::vector<float> weights(static_cast<size_t>(tokens * c.top_k), NAN);
  route_experts(logits.data(), tokens, bias.data(), p, ids.data(), weights.data());
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> ref_ids;
    std::vector<double> ref_weights;
    reference_route(std::vector<float>(logits.begin() + t * c.experts, logits.begin() + (t + 1) * c.experts), bias, p,
                    &ref_ids, &ref_weights);
    for (int64_t i = 0; i < c.top_k; ++i) {
      ASSERT_EQ(ids[t * c.top_k + i], ref_ids[i]) << "token " << t << " slot " << i;
      ASSERT_NEAR(weights[t * c.top_k + i], ref_weights[i], 1e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, RoutingSweep,
                         ::testing::Values(Case{256, 8, 4, 8, true}, Case{8, 4, 2, 2, true}, Case{8, 4, 2, 3, false},
                                           Case{16, 1, 1, 4, true}, Case{64, 8, 8, 6, false}, Case{6, 3, 1, 2, true}));

}  // namespace
}  // namespace fathom::kernels::cpu
