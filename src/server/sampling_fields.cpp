#include "server/sampling_fields.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "server/api_error.h"

namespace fathom::server {

std::vector<std::pair<int32_t, float>> parse_logit_bias(const JsonFields& fields, const std::string& name,
                                                        size_t max_entries) {
  std::vector<std::pair<int32_t, float>> entries;
  const Json* bias = fields.object(name);
  if (bias == nullptr) return entries;
  const std::string param = fields.qualified(name);
  if (bias->size() > max_entries) {
    throw ApiError::invalid_value(param, "Invalid '" + param + "': at most " + std::to_string(max_entries) +
                                             " tokens may be biased, got " + std::to_string(bias->size()) + ".");
  }
  for (const auto& [key, value] : bias->items()) {
    int32_t id = -1;
    const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (key.empty() || error != std::errc() || end != key.data() + key.size() || id < 0) {
      throw ApiError::invalid_value(param, "Invalid '" + param + "': the key '" + key.substr(0, 40) +
                                               "' is not a token id (a non-negative integer written as a string).");
    }
    if (!value.is_number()) fields.type_error(name + "." + key.substr(0, 40), "a number", value);
    const double number = value.get<double>();
    if (!(number >= -100.0 && number <= 100.0)) {
      throw ApiError::invalid_value(param, "Invalid '" + param + "': the bias of token " + key +
                                               " must be between -100 and 100, got " + value.dump() + ".");
    }
    entries.emplace_back(id, static_cast<float>(number));
  }
  std::sort(entries.begin(), entries.end());
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].first == entries[i - 1].first) {  // "5" and "05" name the same token
      throw ApiError::invalid_value(param, "Invalid '" + param + "': token " + std::to_string(entries[i].first) +
                                               " is named twice.");
    }
  }
  return entries;
}

float parse_repetition_penalty(const JsonFields& fields, const std::string& name) {
  const std::optional<double> penalty = fields.number(name);
  if (!penalty) return 1.0f;
  if (!(*penalty > 0.0 && *penalty <= 2.0)) {
    const std::string param = fields.qualified(name);
    throw ApiError::invalid_value(param, "Invalid '" + param + "': must be greater than 0 and at most 2, got " +
                                             Json(*penalty).dump() + ".");
  }
  return static_cast<float>(*penalty);
}

void check_logit_bias_ids(const std::vector<std::pair<int32_t, float>>& logit_bias, int64_t vocab_size,
                          const std::string& param) {
  for (const auto& [id, bias] : logit_bias) {
    if (id >= vocab_size) {
      throw ApiError::invalid_value(param, "Invalid '" + param + "': token id " + std::to_string(id) +
                                               " is outside the vocabulary [0, " + std::to_string(vocab_size) + ").");
    }
  }
}

}  // namespace fathom::server
