// `fathom eval` on a random-weight model with the real DeepSeek tokenizer: grading logic and log-likelihood values.
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/generation.h"
#include "model/weight_loader.h"
#include "fathom_process.h"
#include "tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace fathom {
namespace {

std::string run_command(const std::string& arguments, int* exit_code) {
  testing::RunResult result = testing::run(arguments);
  *exit_code = result.exit_code;
  return result.output;
}

class Eval : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_dir_ = std::string(FATHOM_SHARED_DATA_DIR) + "/deepseek-v3";
    if (!std::ifstream(tokenizer_dir_ + "/tokenizer.json").good()) GTEST_SKIP() << "DeepSeek tokenizer not found";
    nlohmann::json config = fathom::testing::tiny_config_json();
    config["vocab_size"] = 129280;
    fathom::testing::write_config(dir_.path(), config);
  }
  std::string flags() const {
    return "eval --model " + dir_.path() + " --load-format dummy --threads 2 --tokenizer " + tokenizer_dir_;
  }
  void write_data(const std::string& name, const std::vector<nlohmann::json>& records) const {
    std::ofstream out(dir_.file(name));
    for (const auto& record : records) out << record.dump() << "\n";
  }
  fathom::testing::TempDir dir_{"eval"};
  std::string tokenizer_dir_;
};

TEST_F(Eval, ExactMatchGradesTheGreedyContinuation) {
  write_data("probe.jsonl", {{{"prompt", "def fibonacci(n):"}, {"answer", "x"}}});
  int code = 0;
  std::string output = run_command(flags() + " --data " + dir_.file("probe.jsonl") + " --max-new-tokens 4 --output-file " +
                                       dir_.file("probe.json"), &code);
  ASSERT_EQ(code, 0) << output;
  std::ifstream probe(dir_.file("probe.json"));
  const std::string generated = nlohmann::json::parse(probe)["items"][0]["generated"].get<std::string>();
  ASSERT_FALSE(generated.empty());
  // The model's own continuation is right, a different string is wrong.
  write_data("data.jsonl", {{{"prompt", "def fibonacci(n):"}, {"answer", generated}},
                            {{"prompt", "def fibonacci(n):"}, {"answer", generated + "#not-this"}}});
  output = run_command(flags() + " --data " + dir_.file("data.jsonl") + " --max-new-tokens 4", &code);
  ASSERT_EQ(code, 0) << output;
  EXPECT_NE(output.find("accuracy: 0.5000 (1/2)"), std::string::npos) << output;
}

TEST_F(Eval, LogLikelihoodMatchesTheModelsLogits) {
  write_data("ll.jsonl", {{{"prompt", "Hello"}, {"answer", " world"}},
                          {{"prompt", "Hello"}, {"choices", {" world", " world"}}, {"answer_index", 0}}});
  int code = 0;
  const std::string output = run_command(flags() + " --metric log-likelihood --data " + dir_.file("ll.jsonl") +
                                             " --output-file " + dir_.file("ll.json"), &code);
  ASSERT_EQ(code, 0) << output;
  EXPECT_NE(output.find("accuracy: 1.0000 (1/1)"), std::string::npos) << output;  // ties pick the first choice
  EXPECT_NE(output.find("perplexity"), std::string::npos) << output;
  std::ifstream result_file(dir_.file("ll.json"));
  const nlohmann::json result = nlohmann::json::parse(result_file);
  const double reported = result["items"][0]["log_likelihood"].get<double>();
  EXPECT_DOUBLE_EQ(result["items"][1]["choice_log_likelihoods"][0].get<double>(),
                   result["items"][1]["choice_log_likelihoods"][1].get<double>());

  // Recompute independently: log-softmax of the model's logits at the answer positions.
  model::LoadOptions options;
  options.model_dir = dir_.path();
  options.format = model::LoadFormat::kDummy;
  model::LoadedModel loaded = model::load_model(options);
  model::DeepseekV3Model deepseek(loaded.config, loaded.weights);
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(tokenizer_dir_);
  std::vector<int32_t> ids = tok.encode("Hello", true);
  const size_t prompt_size = ids.size();
  const std::vector<int32_t> answer = tok.encode(" world", false);
  ids.insert(ids.end(), answer.begin(), answer.end());
  ThreadPool pool(2);
  model::ExecutionContext context{&pool, kernels::NumericMode::kExact, nullptr};
  const model::SequenceLogits logits = model::compute_sequence_logits(deepseek, ids, false, context);
  double expected = 0.0;
  for (size_t i = 0; i < answer.size(); ++i) {
    const float* row = logits.logits.data() + (prompt_size - 1 + i) * 129280;
    double sum = 0.0;
    for (int v = 0; v < 129280; ++v) sum += std::exp(static_cast<double>(row[v]));
    expected += row[answer[i]] - std::log(sum);
  }
  EXPECT_NEAR(reported, expected, 1e-3 * std::fabs(expected) + 1e-4);
}

TEST_F(Eval, BadDataGivesAClearError) {
  write_data("bad.jsonl", {{{"question", "x"}}});
  int code = 0;
  const std::string output = run_command(flags() + " --data " + dir_.file("bad.jsonl"), &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(output.find("bad.jsonl:1: needs a string \"prompt\""), std::string::npos) << output;
}

TEST_F(Eval, LinesPastTheContextLengthFailBeforeCompute) {
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += " word";
  std::ofstream(dir_.file("long.jsonl")) << nlohmann::json{{"prompt", "Hello"}, {"answer", "x"}}.dump() << "\n\n"
                                         << nlohmann::json{{"prompt", long_prompt}, {"answer", "x"}}.dump() << "\n";
  int code = 0;
  // Line 3 (after a blank line) is named; the first item's generation never runs ("eval: 2 items" never printed).
  std::string output = run_command(flags() + " --data " + dir_.file("long.jsonl"), &code);
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("long.jsonl:3: context length exceeded: "), std::string::npos) << output;
  EXPECT_NE(output.find(" requested new tokens > the model's max_position_embeddings 256"), std::string::npos)
      << output;
  EXPECT_EQ(output.find("eval: 2 items"), std::string::npos) << output;
  output = run_command(flags() + " --metric log-likelihood --data " + dir_.file("long.jsonl"), &code);
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("long.jsonl:3 (prompt + answer): context length exceeded: "), std::string::npos) << output;
  write_data("short.jsonl", {{{"prompt", "Hello"}, {"answer", "x"}}});
  output = run_command(flags() + " --data " + dir_.file("short.jsonl") + " --max-new-tokens 99999999999", &code);
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("short.jsonl:1: context length exceeded: "), std::string::npos) << output;
  EXPECT_NE(output.find(" prompt tokens + 99999999999 requested new tokens"), std::string::npos) << output;
  EXPECT_EQ(output.find("unexpected error"), std::string::npos) << output;
}

TEST_F(Eval, OutputFileFailuresExitNonZero) {
  write_data("data.jsonl", {{{"prompt", "Hello"}, {"answer", "x"}}});
  int code = 0;
  const std::string missing = dir_.file("missing/x.json");
  const std::string data = " --data " + dir_.file("data.jsonl") + " --max-new-tokens 1";
  std::string output = run_command(flags() + data + " --output-file " + missing, &code);
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("--output-file: cannot open " + missing + " for writing: No such file or directory"),
            std::string::npos) << output;
  EXPECT_EQ(output.find("eval: 1 items"), std::string::npos) << output;  // failed before the compute
  output = run_command(flags() + data + " --output-file /dev/full", &code);
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("--output-file: failed writing /dev/full: No space left on device"), std::string::npos)
      << output;
  output = run_command(flags() + data + " --device cuda", &code);  // was run on the CPU, silently
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("eval runs on the CPU backend only"), std::string::npos) << output;
}

// The embedded model's accuracy on Python idioms (bench/eval): a regression guard for numerics and speed work.
// Measured at 27/30 when the set was written (CPU, exact mode).
TEST(EvalOnTheDefaultModel, PythonIdiomsLogLikelihood) {
  const std::string model = std::string(FATHOM_SOURCE_DIR) + "/models/fathom-nano";
  if (!std::ifstream(model + "/model.safetensors").good()) GTEST_SKIP() << "models/fathom-nano not found";
  testing::RunResult result = testing::run("eval --model " + model + " --tokenizer " + model + " --data " +
                                           std::string(FATHOM_SOURCE_DIR) +
                                           "/bench/eval/fathom_nano_python_idioms.jsonl --metric log-likelihood");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const size_t at = result.output.find("accuracy: ");
  ASSERT_NE(at, std::string::npos) << result.output;
  EXPECT_GE(std::stod(result.output.substr(at + 10)), 0.85) << result.output;
}

}  // namespace
}  // namespace fathom
