#include "tokenizer/onig_regex.h"

#include <oniguruma.h>

#include <mutex>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fathom::tokenizer {

namespace {
// Oniguruma's one-time library setup is not itself thread-safe.
void ensure_oniguruma_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

size_t utf8_char_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}
}  // namespace

RegexScratch::RegexScratch() : region_(onig_region_new()) {}
RegexScratch::~RegexScratch() { onig_region_free(region_, 1); }

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  ensure_oniguruma_initialized();
  OnigRegex compiled = nullptr;
  OnigErrorInfo error_info;
  const auto* begin = reinterpret_cast<const OnigUChar*>(pattern_.data());
  int status = onig_new(&compiled, begin, begin + pattern_.size(), ONIG_OPTION_CAPTURE_GROUP,
                        ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &error_info);
  if (status != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, status, &error_info);
    FATHOM_FAIL("invalid regex '" << pattern_ << "': " << reinterpret_cast<const char*>(message));
  }
  compiled_ = std::shared_ptr<re_pattern_buffer>(compiled, [](OnigRegex r) { onig_free(r); });
}

Regex Regex::literal(std::string_view literal) {
  // Escape the regex metacharacters; every other character matches itself.
  static constexpr std::string_view kMeta = "\\.+*?()|[]{}^$";
  std::string escaped;
  for (char c : literal) {
    if (kMeta.find(c) != std::string_view::npos) escaped.push_back('\\');
    escaped.push_back(c);
  }
  return Regex(escaped);
}

Regex Regex::from_pattern_json(const nlohmann::json& pattern, std::string_view owner) {
  if (pattern.is_object() && pattern.contains("String")) return literal(pattern.at("String").get<std::string>());
  if (pattern.is_object() && pattern.contains("Regex")) return Regex(pattern.at("Regex").get<std::string>());
  FATHOM_FAIL(std::string(owner) << " pattern must be {\"String\": ...} or {\"Regex\": ...}, got " << pattern.dump());
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches,
                     RegexScratch& scratch) const {
  matches.clear();
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const OnigUChar* end = str + text.size();
  size_t search_from = 0;
  bool have_last_end = false;
  size_t last_match_end = 0;
  OnigRegion* region = scratch.region();
  while (search_from <= text.size()) {
    onig_region_clear(region);
    int found = onig_search(compiled_.get(), str, end, str + search_from, end, region, ONIG_OPTION_NONE);
    if (found == ONIG_MISMATCH) break;
    FATHOM_CHECK(found >= 0, "regex '" << pattern_ << "' search failed with code " << found);
    size_t match_begin = static_cast<size_t>(region->beg[0]);
    size_t match_end = static_cast<size_t>(region->end[0]);
    if (match_begin == match_end && have_last_end && last_match_end == match_end) {
      search_from += search_from < text.size() ? utf8_char_length(str[search_from]) : 1;
      continue;
    }
    search_from = match_end;
    have_last_end = true;
    last_match_end = match_end;
    matches.emplace_back(match_begin, match_end);
  }
}

bool Regex::matches_at(std::string_view text, size_t pos, RegexScratch& scratch) const {
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  int length = onig_match(compiled_.get(), str, str + text.size(), str + pos, scratch.region(), ONIG_OPTION_NONE);
  return length >= 0;
}

}  // namespace fathom::tokenizer
