// TokenizerData::parse: tokenizer.json + tokenizer_config.json -> immutable tokenizer data.
#include <algorithm>
#include <unordered_set>

#include "core/error.h"
#include "tokenizer/tokenizer_data.h"

namespace fathom::tokenizer {

namespace {

// Ids index dense per-id tables, so absurd ids are rejected instead of allocated.
constexpr int32_t kMaxTokenId = 1 << 24;

nlohmann::json parse_json(const std::string& text, const char* what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    FATHOM_FAIL(what << " is not valid JSON: " << error.what());
  }
}

// Parses tokenizer.json, moving model.vocab entries and string-form model.merges into `tables`
// as they are read: a DOM of ~250k small values would take most of the load time.
nlohmann::json parse_tokenizer_json(const std::string& text, StreamedBpeTables& tables) {
  using Event = nlohmann::json::parse_event_t;
  std::string path_keys[4];  // object keys at depths 1..3
  auto in_model = [&](const char* member) { return path_keys[1] == "model" && path_keys[2] == member; };
  auto callback = [&](int depth, Event event, nlohmann::json& parsed) {
    if (event == Event::key) {
      if (depth < 4) path_keys[depth] = parsed.get_ref<const std::string&>();
      return !(depth == 3 && in_model("vocab"));  // keep vocab entries out of the DOM
    }
    if (event != Event::value || depth != 3) return true;
    if (in_model("vocab")) {
      FATHOM_CHECK(parsed.is_number_integer(), "BPE vocab id of token '" << path_keys[3] << "' must be an integer, got " << parsed.dump());
      tables.vocab.emplace_back(std::move(path_keys[3]), parsed.get<int64_t>());
      return false;
    }
    if (in_model("merges") && parsed.is_string()) {
      tables.merges.push_back(std::move(parsed.get_ref<std::string&>()));
      return false;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, callback);
  } catch (const nlohmann::json::exception& error) {
    FATHOM_FAIL("tokenizer.json is not valid JSON: " << error.what());
  }
}

// tokenizer_config values are plain strings or {"__type": "AddedToken", "content": ...} objects.
std::string config_token(const nlohmann::json& config, const char* key) {
  if (!config.contains(key) || config.at(key).is_null()) return "";
  const auto& value = config.at(key);
  if (value.is_string()) return value.get<std::string>();
  FATHOM_CHECK(value.is_object() && value.contains("content") && value.at("content").is_string(),
               "tokenizer_config " << key << " must be a string or an AddedToken object, got " << value.dump());
  return value.at("content").get<std::string>();
}

std::optional<bool> config_flag(const nlohmann::json& config, const char* key) {
  if (!config.contains(key) || config.at(key).is_null()) return std::nullopt;
  FATHOM_CHECK(config.at(key).is_boolean(), "tokenizer_config " << key << " must be a boolean, got " << config.at(key).dump());
  return config.at(key).get<bool>();
}

AddedToken parse_added_token(const nlohmann::json& entry) {
  AddedToken token;
  token.content = entry.at("content").get<std::string>();
  token.id = entry.at("id").get<int32_t>();
  token.single_word = entry.value("single_word", false);
  token.lstrip = entry.value("lstrip", false);
  token.rstrip = entry.value("rstrip", false);
  token.special = entry.value("special", false);
  token.normalized = entry.value("normalized", !token.special);
  FATHOM_CHECK(token.id >= 0 && token.id < kMaxTokenId,
               "added token '" << token.content << "' has id " << token.id << " outside [0, " << kMaxTokenId << ")");
  return token;
}

}  // namespace

std::shared_ptr<const TokenizerData> TokenizerData::parse(const std::string& tokenizer_json, const std::string& config_json) {
  StreamedBpeTables streamed;
  const nlohmann::json root = parse_tokenizer_json(tokenizer_json, streamed);
  FATHOM_CHECK(root.is_object() && root.contains("model"), "tokenizer.json has no \"model\"");
  auto data = std::make_shared<TokenizerData>();
  if (!config_json.empty()) data->config = parse_json(config_json, "tokenizer_config.json");
  FATHOM_CHECK(data->config.is_object(), "tokenizer_config.json must be a JSON object");

  data->normalizer = Normalizer::from_json(root.value("normalizer", nlohmann::json()));
  data->pre_tokenizer = PreTokenizer::from_json(root.value("pre_tokenizer", nlohmann::json()));
  data->model = BpeModel::from_json(root.at("model"), streamed);
  data->decoder = Decoder::from_json(root.value("decoder", nlohmann::json()));

  // HF lists special tokens first, then the others; a token already in the model keeps the model's id.
  std::vector<AddedToken> special, plain;
  for (const auto& entry : root.value("added_tokens", nlohmann::json::array())) {
    AddedToken token = parse_added_token(entry);
    if (token.content.empty()) continue;
    if (auto model_id = data->model.token_to_id(token.content)) token.id = *model_id;
    (token.special ? special : plain).push_back(std::move(token));
  }
  data->added_tokens = std::move(special);
  data->added_tokens.insert(data->added_tokens.end(), plain.begin(), plain.end());

  std::vector<AddedToken> raw_tokens, normalized_tokens;
  std::vector<std::string> raw_patterns, normalized_patterns;
  RegexScratch scratch;
  for (const AddedToken& token : data->added_tokens) {
    data->added_token_ids.emplace(token.content, token.id);
    if (token.normalized) {
      normalized_tokens.push_back(token);
      normalized_patterns.push_back(data->normalizer.normalize(token.content, scratch));
    } else {
      raw_tokens.push_back(token);
      raw_patterns.push_back(token.content);
    }
  }
  data->raw_matcher = std::make_unique<AddedTokenMatcher>(raw_tokens, raw_patterns);
  data->normalized_matcher = std::make_unique<AddedTokenMatcher>(normalized_tokens, normalized_patterns);

  data->vocab_size = data->model.id_limit();
  for (const AddedToken& token : data->added_tokens) data->vocab_size = std::max(data->vocab_size, token.id + 1);
  const auto size = static_cast<size_t>(data->vocab_size);
  data->id_tokens.assign(size, std::string());
  data->id_flags.assign(size, 0);
  for (int32_t id = 0; id < data->model.id_limit(); ++id) {
    if (const std::string* token = data->model.id_to_token(id)) {
      data->id_tokens[static_cast<size_t>(id)] = *token;
      data->id_flags[static_cast<size_t>(id)] = kHasToken;
    }
  }
  for (const AddedToken& token : data->added_tokens) {
    data->id_tokens[static_cast<size_t>(token.id)] = token.content;
    data->id_flags[static_cast<size_t>(token.id)] = kHasToken;
  }
  // HF skips by content: any id whose string is a special added token's content counts as special.
  std::unordered_set<std::string> special_contents;
  for (const AddedToken& token : data->added_tokens) {
    if (token.special) special_contents.insert(token.content);
  }
  for (size_t id = 0; id < size; ++id) {
    if ((data->id_flags[id] & kHasToken) && special_contents.count(data->id_tokens[id])) data->id_flags[id] |= kSpecial;
  }
  if (data->decoder.is_per_token()) {
    data->token_pieces.assign(size, std::string());
    for (size_t id = 0; id < size; ++id) {
      if (data->id_flags[id] & kHasToken) data->token_pieces[id] = data->decoder.token_piece(data->id_tokens[id], scratch);
    }
  }

  data->bos_token = config_token(data->config, "bos_token");
  data->eos_token = config_token(data->config, "eos_token");
  if (!data->bos_token.empty()) data->bos_id = data->token_to_id(data->bos_token);
  if (!data->eos_token.empty()) data->eos_id = data->token_to_id(data->eos_token);
  const std::optional<bool> add_bos = config_flag(data->config, "add_bos_token");
  const std::optional<bool> add_eos = config_flag(data->config, "add_eos_token");
  if (add_bos || add_eos) {
    // transformers replaces the tokenizer.json post-processor with BOS/EOS per these flags.
    FATHOM_CHECK(!add_bos.value_or(false) || data->bos_id,
                 "tokenizer_config add_bos_token is true but bos_token '" << data->bos_token << "' is not a token");
    FATHOM_CHECK(!add_eos.value_or(false) || data->eos_id,
                 "tokenizer_config add_eos_token is true but eos_token '" << data->eos_token << "' is not a token");
    data->post_processor = PostProcessor::from_bos_eos(add_bos.value_or(false) ? data->bos_id : std::nullopt,
                                                       add_eos.value_or(false) ? data->eos_id : std::nullopt);
    data->add_bos_token = add_bos.value_or(false);
  } else {
    data->post_processor = PostProcessor::from_json(root.value("post_processor", nlohmann::json()));
    const auto& prefix = data->post_processor.prefix();
    data->add_bos_token = data->bos_id && !prefix.empty() && prefix.front() == *data->bos_id;
  }
  return data;
}

std::optional<int32_t> TokenizerData::token_to_id(std::string_view token) const {
  auto it = added_token_ids.find(token);
  if (it != added_token_ids.end()) return it->second;
  return model.token_to_id(token);
}

}  // namespace fathom::tokenizer
