#pragma once
// RoPE frequencies for the rope dims of MLA, with DeepSeek's YaRN scaling, as transformers computes them.
#include "kernels/cpu/rope.h"
#include "model/config.h"

namespace fathom::model {

kernels::cpu::RopeFrequencies make_rope_frequencies(const ModelConfig& config);

}  // namespace fathom::model
