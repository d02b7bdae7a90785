// `fathom eval`: scores a model on a JSON-lines file of prompts and answers, so accuracy regressions of speed work
// are visible. Modes: exact-match (greedy generation compared with the answer) and log-likelihood (sum of the
// answer's token log-probabilities given the prompt; with "choices", the highest-scoring choice is the prediction).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/model_options.h"
#include "core/error.h"
#include "model/config.h"
#include "model/generation.h"
#include "tokenizer/tokenizer.h"

namespace fathom::app {

namespace {

struct EvalItem {
  std::string prompt;
  std::string answer;                // exact-match target, or the correct continuation
  std::vector<std::string> choices;  // log-likelihood multiple choice (answer_index picks the correct one)
  int64_t answer_index = -1;
  int64_t line = 0;                  // in the data file, for errors
};

// An item's token ids, all tokenized (and checked against the context length) before the model runs.
struct TokenizedItem {
  std::vector<int32_t> prompt;
  std::vector<int32_t> answer;                 // log-likelihood without choices
  std::vector<std::vector<int32_t>> choices;
};

std::vector<EvalItem> read_items(const std::string& path) {
  std::ifstream file(path);
  FATHOM_CHECK(file.good(), "eval: cannot open " << path);
  std::vector<EvalItem> items;
  std::string line;
  for (int64_t number = 1; std::getline(file, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    FATHOM_CHECK(!record.is_discarded() && record.is_object(), path << ":" << number << ": not a JSON object");
    FATHOM_CHECK(record.contains("prompt") && record["prompt"].is_string(), path << ":" << number << ": needs a string \"prompt\"");
    EvalItem item;
    item.line = number;
    item.prompt = record["prompt"].get<std::string>();
    if (record.contains("choices")) {
      FATHOM_CHECK(record["choices"].is_array() && !record["choices"].empty() && record.contains("answer_index") &&
                       record["answer_index"].is_number_integer(),
                   path << ":" << number << ": \"choices\" needs a non-empty list and an integer \"answer_index\"");
      for (const auto& choice : record["choices"]) {
        FATHOM_CHECK(choice.is_string(), path << ":" << number << ": choices must be strings");
        item.choices.push_back(choice.get<std::string>());
      }
      item.answer_index = record["answer_index"].get<int64_t>();
      FATHOM_CHECK(item.answer_index >= 0 && item.answer_index < static_cast<int64_t>(item.choices.size()),
                   path << ":" << number << ": answer_index out of range");
    } else {
      FATHOM_CHECK(record.contains("answer") && record["answer"].is_string(),
                   path << ":" << number << ": needs a string \"answer\" (or \"choices\" + \"answer_index\")");
      item.answer = record["answer"].get<std::string>();
    }
    items.push_back(std::move(item));
  }
  FATHOM_CHECK(!items.empty(), "eval: " << path << " has no items");
  return items;
}

// Σ log p(continuation tokens | prompt tokens), scoring every continuation position in one forward pass.
double continuation_log_likelihood(model::DeepseekV3Model& deepseek, const std::vector<int32_t>& prompt,
                                   const std::vector<int32_t>& continuation, const model::ExecutionContext& context) {
  FATHOM_CHECK(!prompt.empty() && !continuation.empty(), "eval: empty prompt or continuation after tokenization");
  std::vector<int32_t> sequence = prompt;
  sequence.insert(sequence.end(), continuation.begin(), continuation.end());
  model::SequenceLogits result = model::compute_sequence_logits(deepseek, sequence, false, context);
  const int64_t vocab = deepseek.config().vocab_size;
  double total = 0.0;
  for (size_t i = 0; i < continuation.size(); ++i) {
    const float* row = result.logits.data() + (prompt.size() - 1 + i) * vocab;  // predicts sequence[prompt.size() + i]
    double max_logit = row[0];
    for (int64_t v = 1; v < vocab; ++v) max_logit = std::max<double>(max_logit, row[v]);
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max_logit);
    total += row[continuation[i]] - max_logit - std::log(sum);
  }
  return total;
}

std::string trim(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r\n") - begin + 1);
}

}  // namespace

int run_eval(const Args& raw_args) {
  std::set<std::string> value_flags = model_value_flags();
  value_flags.insert({"--tokenizer", "--data", "--metric", "--max-new-tokens", "--output-file"});
  CliArgs args(raw_args, value_flags, {"--verbose"});
  ModelCliOptions options = parse_model_options(args);
  options.load.load_mtp = false;
  FATHOM_CHECK(options.device == executor::Device::kCpu,
               "eval runs on the CPU backend only (--device cuda: use serve and a client, e.g. bench-serving)");
  const std::string metric = args.get_or("--metric", "exact-match");
  FATHOM_CHECK(metric == "exact-match" || metric == "log-likelihood",
               "--metric must be exact-match or log-likelihood, got '" << metric << "'");
  const std::string data_path = args.require("--data");
  const std::vector<EvalItem> items = read_items(data_path);
  const int64_t max_new_tokens = args.get_int_or("--max-new-tokens", 32);

  const model::ModelConfig config = model::load_model_config(options.load.model_dir, options.load.override_config);
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(args.get_or("--tokenizer", options.load.model_dir))
                                 .with_model_vocab_size(static_cast<int32_t>(config.vocab_size));
  // Every item is tokenized and fits the context before any compute: a too-long line fails at once, not hours in.
  std::vector<TokenizedItem> tokenized;
  for (size_t index = 0; index < items.size(); ++index) {
    const EvalItem& item = items[index];
    const std::string where = data_path + ":" + std::to_string(item.line);
    TokenizedItem ids;
    ids.prompt = tok.encode(item.prompt, /*add_special_tokens=*/true);
    const int64_t prompt_tokens = static_cast<int64_t>(ids.prompt.size());
    if (metric == "exact-match") {
      FATHOM_CHECK(item.choices.empty(), where << ": item " << index << " has choices; use --metric log-likelihood");
      check_context_length(prompt_tokens, max_new_tokens, config.max_position_embeddings, where);
    } else if (item.choices.empty()) {
      ids.answer = tok.encode(item.answer, false);
      check_context_length(prompt_tokens + static_cast<int64_t>(ids.answer.size()), 0, config.max_position_embeddings,
                           where + " (prompt + answer)");
    } else {
      for (const std::string& choice : item.choices) {
        ids.choices.push_back(tok.encode(choice, false));
        check_context_length(prompt_tokens + static_cast<int64_t>(ids.choices.back().size()), 0,
                             config.max_position_embeddings, where + " (prompt + choice)");
      }
    }
    tokenized.push_back(std::move(ids));
  }
  std::optional<std::ofstream> output_file;  // opened now so a bad path fails before the compute
  if (auto output = args.get("--output-file")) output_file = open_output_file(*output, "--output-file");

  model::LoadedModel loaded = model::load_model(options.load);
  model::DeepseekV3Model deepseek(loaded.config, loaded.weights);
  ThreadPool pool(options.num_threads);
  model::ExecutionContext context{&pool, options.mode, nullptr};

  int64_t correct = 0, graded = 0;  // graded: items with a right/wrong outcome (exact-match, or choices)
  double log_likelihood_sum = 0.0;
  int64_t scored_tokens = 0;
  nlohmann::json per_item = nlohmann::json::array();
  for (size_t index = 0; index < items.size(); ++index) {
    const EvalItem& item = items[index];
    const std::vector<int32_t>& prompt = tokenized[index].prompt;
    bool is_correct = false;
    nlohmann::json record = {{"index", index}};
    if (metric == "exact-match") {
      model::GreedyOptions greedy;
      greedy.max_new_tokens = max_new_tokens;
      const std::vector<int32_t> generated = model::greedy_generate(deepseek, prompt, greedy, context);
      const std::string text = tok.decode(generated, /*skip_special_tokens=*/true);
      // The answer must open the generation (after whitespace): generations run past short answers.
      is_correct = trim(text).rfind(trim(item.answer), 0) == 0;
      record["generated"] = text;
    } else if (item.choices.empty()) {
      const std::vector<int32_t>& answer = tokenized[index].answer;
      const double score = continuation_log_likelihood(deepseek, prompt, answer, context);
      log_likelihood_sum += score;
      scored_tokens += static_cast<int64_t>(answer.size());
      record["log_likelihood"] = score;
      per_item.push_back(record);  // no alternatives: it counts toward perplexity, not accuracy
      if (args.has("--verbose")) std::printf("%s\n", record.dump().c_str());
      continue;
    } else {
      int64_t best = 0;
      double best_score = -INFINITY;
      nlohmann::json scores = nlohmann::json::array();
      for (size_t c = 0; c < item.choices.size(); ++c) {
        const double score = continuation_log_likelihood(deepseek, prompt, tokenized[index].choices[c], context);
        scores.push_back(score);
        if (score > best_score) best_score = score, best = static_cast<int64_t>(c);
      }
      is_correct = best == item.answer_index;
      record["choice_log_likelihoods"] = scores;
      record["predicted_index"] = best;
    }
    correct += is_correct;
    ++graded;
    record["correct"] = is_correct;
    per_item.push_back(record);
    if (args.has("--verbose")) std::printf("%s\n", record.dump().c_str());
  }
  std::printf("eval: %zu items, metric %s\n", items.size(), metric.c_str());
  nlohmann::json summary = {{"items", items.size()}, {"metric", metric}};
  if (metric == "log-likelihood" && scored_tokens > 0) {
    const double perplexity = std::exp(-log_likelihood_sum / static_cast<double>(scored_tokens));
    std::printf("log-likelihood: %.4f over %lld answer tokens, perplexity %.3f\n", log_likelihood_sum,
                static_cast<long long>(scored_tokens), perplexity);
    summary["log_likelihood"] = log_likelihood_sum;
    summary["perplexity"] = perplexity;
  }
  if (graded > 0) {
    const double accuracy = static_cast<double>(correct) / static_cast<double>(graded);
    std::printf("accuracy: %.4f (%lld/%lld)\n", accuracy, static_cast<long long>(correct), static_cast<long long>(graded));
    summary["accuracy"] = accuracy;
  }
  if (output_file) {
    *output_file << nlohmann::json{{"summary", summary}, {"items", per_item}}.dump(2) << "\n";
    finish_output_file(*output_file, *args.get("--output-file"), "--output-file");
  }
  flush_stdout();
  return 0;
}

}  // namespace fathom::app
