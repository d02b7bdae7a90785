#include "tokenizer/normalizer.h"

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace fathom::tokenizer {

void Normalizer::append_steps(const nlohmann::json& config, std::vector<Step>& steps) {
  const std::string type = config.value("type", "");
  if (type == "Sequence") {
    for (const auto& child : config.at("normalizers")) append_steps(child, steps);
  } else if (type == "Prepend") {
    steps.push_back({Kind::kPrepend, config.at("prepend").get<std::string>(), nullptr});
  } else if (type == "Replace") {
    steps.push_back({Kind::kReplace, config.at("content").get<std::string>(),
                     std::make_shared<Regex>(Regex::from_pattern_json(config.at("pattern"), "Replace normalizer"))});
  } else if (type == "Strip") {
    Step step{Kind::kStrip, "", nullptr};
    step.strip_left = config.value("strip_left", false);
    step.strip_right = config.value("strip_right", false);
    steps.push_back(step);
  } else {
    FATHOM_FAIL("unsupported normalizer type '" << type
                                               << "' (supported: Sequence, Prepend, Replace, Strip)");
  }
}

Normalizer Normalizer::from_json(const nlohmann::json& config) {
  Normalizer normalizer;
  if (config.is_null()) return normalizer;
  append_steps(config, normalizer.steps_);
  normalizer.whitespace_ = std::make_shared<Regex>("\\p{White_Space}");
  return normalizer;
}

std::string Normalizer::normalize(std::string_view text, RegexScratch& scratch) const {
  std::string current(text);
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kPrepend:
        if (!current.empty()) current.insert(0, step.text);
        break;
      case Kind::kReplace: {
        step.pattern->find_all(current, matches, scratch);
        if (matches.empty()) break;
        std::string replaced;
        size_t copied = 0;
        for (const auto& [begin, end] : matches) {
          replaced.append(current, copied, begin - copied);
          replaced.append(step.text);
          copied = end;
        }
        replaced.append(current, copied, std::string::npos);
        current = std::move(replaced);
        break;
      }
      case Kind::kStrip: {
        size_t begin = 0, end = current.size();
        while (step.strip_left && begin < end && whitespace_->matches_at(current, begin, scratch)) {
          utf8::decode_next(current, begin);
        }
        while (step.strip_right && end > begin) {
          size_t char_start;
          utf8::decode_before(current, end, &char_start);
          if (!whitespace_->matches_at(current, char_start, scratch)) break;
          end = char_start;
        }
        current = current.substr(begin, end - begin);
        break;
      }
    }
  }
  return current;
}

}  // namespace fathom::tokenizer
