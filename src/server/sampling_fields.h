#pragma once
// The request fields that change the logits before a draw, read alike by the OpenAI endpoints and /generate:
// logit_bias (OpenAI), repetition_penalty and min_tokens / min_new_tokens (vLLM / SGLang).
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "server/json_fields.h"

namespace fathom::server {

// `name` as OpenAI's logit_bias: {"<token id>": bias in [-100, 100], ...} -> (id, bias) pairs, ids ascending and
// unique; absent or {} -> empty. Throws ApiError(400) naming the field for a key that is not a token id, a bias that
// is not a number in range, or more than max_entries entries. Ids are checked against the vocabulary later
// (check_logit_bias_ids), where the vocabulary is known.
std::vector<std::pair<int32_t, float>> parse_logit_bias(const JsonFields& fields, const std::string& name,
                                                        size_t max_entries);

// `name` in (0, 2] (1: off), as SGLang bounds it; absent -> 1.
float parse_repetition_penalty(const JsonFields& fields, const std::string& name);

// Throws ApiError(400) on `param` when an id is >= vocab_size.
void check_logit_bias_ids(const std::vector<std::pair<int32_t, float>>& logit_bias, int64_t vocab_size,
                          const std::string& param);

}  // namespace fathom::server
