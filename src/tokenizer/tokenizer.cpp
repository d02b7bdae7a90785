#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/tokenizer_data.h"
#include "tokenizer/utf8.h"

namespace fathom::tokenizer {

namespace {
std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  FATHOM_CHECK(file, "cannot open " << path.string());
  std::ostringstream contents;
  contents << file.rdbuf();
  FATHOM_CHECK(!file.bad(), "cannot read " << path.string());
  return contents.str();
}
}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerData> data) : data_(std::move(data)) {
  model_vocab_size_ = data_->vocab_size;
}

Tokenizer Tokenizer::from_json(const std::string& tokenizer_json, const std::string& tokenizer_config_json) {
  return Tokenizer(TokenizerData::parse(tokenizer_json, tokenizer_config_json));
}

Tokenizer Tokenizer::load(const std::string& dir) {
  const std::filesystem::path root(dir);
  const auto tokenizer_path = root / "tokenizer.json";
  FATHOM_CHECK(std::filesystem::is_regular_file(tokenizer_path), "tokenizer directory " << dir << " has no tokenizer.json");
  const auto config_path = root / "tokenizer_config.json";
  std::string config_json = std::filesystem::is_regular_file(config_path) ? read_file(config_path) : std::string();
  auto parse = [&]() -> Tokenizer {
    try {
      return from_json(read_file(tokenizer_path), config_json);
    } catch (const Error& error) {
      FATHOM_FAIL("loading tokenizer from " << dir << ": " << error.what());
    }
  };
  Tokenizer tokenizer = parse();
  const auto model_config_path = root / "config.json";
  if (std::filesystem::is_regular_file(model_config_path)) {
    nlohmann::json model_config;
    try {
      model_config = nlohmann::json::parse(read_file(model_config_path));
    } catch (const nlohmann::json::exception& error) {
      FATHOM_FAIL(model_config_path.string() << " is not valid JSON: " << error.what());
    }
    if (model_config.is_object() && model_config.contains("vocab_size")) {
      tokenizer = tokenizer.with_model_vocab_size(model_config.at("vocab_size").get<int32_t>());
    }
  }
  return tokenizer;
}

Tokenizer Tokenizer::with_model_vocab_size(int32_t model_vocab_size) const {
  FATHOM_CHECK(model_vocab_size >= data_->vocab_size, "model vocab size " << model_vocab_size
                                                         << " is smaller than the tokenizer's " << data_->vocab_size << " ids");
  Tokenizer copy = *this;
  copy.model_vocab_size_ = model_vocab_size;
  return copy;
}

Tokenizer Tokenizer::with_max_input_bytes(size_t max_input_bytes) const {
  Tokenizer copy = *this;
  copy.max_input_bytes_ = max_input_bytes;
  return copy;
}

void Tokenizer::check_id(int32_t id) const {
  FATHOM_CHECK(id >= 0 && id < model_vocab_size_, "token id " << id << " is outside [0, " << model_vocab_size_ << ")");
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  FATHOM_CHECK(text.size() <= max_input_bytes_,
               "text to encode is " << text.size() << " bytes, over the limit of " << max_input_bytes_ << " bytes");
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::to_lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = data_->post_processor.prefix();
  data_->encode_into(text, ids);
  if (add_special_tokens) ids.insert(ids.end(), data_->post_processor.suffix().begin(), data_->post_processor.suffix().end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const TokenizerData& data = *data_;
  auto keep = [&](int32_t id) {
    check_id(id);
    if (id >= data.vocab_size) return false;
    const uint8_t flags = data.id_flags[static_cast<size_t>(id)];
    return (flags & TokenizerData::kHasToken) && !(skip_special_tokens && (flags & TokenizerData::kSpecial));
  };
  if (data.decoder.is_per_token()) {
    std::string joined;
    bool first = true;
    for (int32_t id : ids) {
      if (!keep(id)) continue;
      if (!first) joined.append(data.decoder.separator());
      first = false;
      joined.append(data.token_pieces[static_cast<size_t>(id)]);
    }
    return data.decoder.output_is_bytes() ? utf8::to_lossy(joined) : joined;
  }
  std::vector<std::string_view> tokens;
  for (int32_t id : ids) {
    if (keep(id)) tokens.push_back(data.id_tokens[static_cast<size_t>(id)]);
  }
  RegexScratch scratch;
  return data.decoder.decode(tokens, scratch);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const { return data_->token_to_id(token); }

std::string Tokenizer::id_to_token(int32_t id) const {
  check_id(id);
  return id < data_->vocab_size ? data_->id_tokens[static_cast<size_t>(id)] : std::string();
}

int32_t Tokenizer::vocab_size() const { return data_->vocab_size; }
std::optional<int32_t> Tokenizer::bos_token_id() const { return data_->bos_id; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return data_->eos_id; }
std::string Tokenizer::bos_token() const { return data_->bos_token; }
std::string Tokenizer::eos_token() const { return data_->eos_token; }
bool Tokenizer::add_bos_token() const { return data_->add_bos_token; }
const nlohmann::json& Tokenizer::tokenizer_config() const { return data_->config; }

bool Tokenizer::is_special(int32_t id) const {
  check_id(id);
  return id < data_->vocab_size && (data_->id_flags[static_cast<size_t>(id)] & TokenizerData::kSpecial);
}

}  // namespace fathom::tokenizer
