// The `fathom logits` / `fathom generate` command-line contract, run as a user would.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include <gtest/gtest.h>

#include "model/safetensors.h"
#include "fathom_process.h"
#include "tiny_model.h"

namespace fathom {
namespace {

using testing::RunResult;
using testing::run;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override { fathom::testing::write_config(dir_.path(), fathom::testing::tiny_config_json()); }
  std::string model_flags() const { return "--model " + dir_.path() + " --load-format dummy --threads 2"; }
  fathom::testing::TempDir dir_{"cli"};
};

TEST_F(Cli, LogitsWritesLogitsAndMtpLogits) {
  const std::string out = dir_.file("out.safetensors");
  RunResult result = run("logits " + model_flags() + " --ids 5,6,7,8 --mtp --out " + out);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  auto file = model::SafetensorsFile::open(out);
  EXPECT_EQ(file->tensor("logits").shape(), (std::vector<int64_t>{4, 300}));
  EXPECT_EQ(file->tensor("logits").dtype(), DType::F32);
  EXPECT_EQ(file->tensor("mtp_logits").shape(), (std::vector<int64_t>{3, 300}));
  RunResult w8a8 = run("logits " + model_flags() + " --ids 5,6,7,8 --mode w8a8 --out " + dir_.file("q.safetensors"));
  ASSERT_EQ(w8a8.exit_code, 0) << w8a8.output;
  EXPECT_FALSE(model::SafetensorsFile::open(dir_.file("q.safetensors"))->contains("mtp_logits"));
}

TEST_F(Cli, GeneratePrintsNewTokenIds) {
  RunResult result = run("generate " + model_flags() + " --ids 5,6,7 --max-new-tokens 4 --ignore-eos");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  int count = 1;
  for (char c : result.output) count += c == ',';
  EXPECT_EQ(count, 4) << result.output;
  RunResult chunked = run("generate " + model_flags() + " --ids 5,6,7 --max-new-tokens 4 --ignore-eos --chunked-prefill-size 1");
  EXPECT_EQ(chunked.output, result.output);
}

TEST_F(Cli, BenchOneBatchReportsPrefillDecodeAndWritesATrace) {
  const std::string prefix = dir_.file("profile");
  RunResult result = run("bench-one-batch " + model_flags() + " --batch-size 1,3 --input-len 6 --output-len 3 --profile " +
                         prefix + " --result-filename " + dir_.file("results.jsonl"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  // The CPU backend samples on the host: the step includes the logits' copy and the host argmax.
  for (const char* expected : {"Sampling: greedy on the host", "Warmup ...", "Benchmark ...", "Prefill. latency:",
                               "Decode 0. Batch size: 3, latency:", "Decode.  median latency:", "Total. latency:"}) {
    EXPECT_NE(result.output.find(expected), std::string::npos) << expected << "\n" << result.output;
  }
  std::ifstream trace(prefix + "-bs3.trace.json");
  std::string text((std::istreambuf_iterator<char>(trace)), std::istreambuf_iterator<char>());
  for (const char* span : {"\"traceEvents\"", "\"layer.2\"", "\"self_attn\"", "\"moe\"", "\"lm_head\""}) {
    EXPECT_NE(text.find(span), std::string::npos) << span;
  }
  std::ifstream results(dir_.file("results.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(results, line);) ++lines;
  EXPECT_EQ(lines, 2);
  RunResult host = run("bench-one-batch " + model_flags() + " --input-len 6 --output-len 3 --host-sampling");
  ASSERT_EQ(host.exit_code, 0) << host.output;
  EXPECT_NE(host.output.find("Sampling: greedy on the host"), std::string::npos) << host.output;
  // KV slots in whole pages (each sequence's run rounded up to pages of 4: strides of 12 for 9 positions).
  RunResult paged = run("bench-one-batch " + model_flags() + " --batch-size 2 --input-len 6 --output-len 3 --page-size 4");
  ASSERT_EQ(paged.exit_code, 0) << paged.output;
  EXPECT_NE(paged.output.find("Decode.  median latency:"), std::string::npos) << paged.output;
  RunResult bad_page = run("bench-one-batch " + model_flags() + " --input-len 6 --output-len 3 --page-size 0");
  EXPECT_NE(bad_page.exit_code, 0);
  EXPECT_NE(bad_page.output.find("--page-size must be positive, got 0"), std::string::npos) << bad_page.output;
  RunResult cuda = run("bench-one-batch " + model_flags() + " --input-len 6 --output-len 3 --device cuda");
  EXPECT_NE(cuda.exit_code, 0);
  // CI has no GPU: a clear error either way (built with CUDA: no device; without: no CUDA backend).
  EXPECT_TRUE(cuda.output.find("no CUDA device") != std::string::npos ||
              cuda.output.find("built without the CUDA toolkit") != std::string::npos)
      << cuda.output;
}

// `fathom <arguments>` with stdout on /dev/full (a full disk); the result's output is stderr only.
RunResult run_with_full_stdout(const std::string& arguments) {
  FILE* pipe = popen((std::string(FATHOM_BINARY) + " " + arguments + " 2>&1 >/dev/full").c_str(), "r");
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

void expect_error(const RunResult& result, const std::string& expected, const std::string& what) {
  EXPECT_EQ(result.exit_code, 1) << what << "\n" << result.output;
  EXPECT_NE(result.output.find(expected), std::string::npos) << what << "\n" << result.output;
  EXPECT_EQ(result.output.find("unexpected error"), std::string::npos) << what << "\n" << result.output;
}

std::string repeated_ids(int count) {
  std::string ids;
  for (int i = 0; i < count; ++i) ids += (i ? ",5" : "5");
  return ids;
}

TEST_F(Cli, SequencesPastTheContextLengthAreRefusedBeforeCompute) {
  const std::string limit = " > the model's max_position_embeddings 256";
  expect_error(run("generate " + model_flags() + " --ids 5 --max-new-tokens 1000 --ignore-eos"),
               "context length exceeded: 1 prompt tokens + 1000 requested new tokens" + limit, "generate 1000");
  // Checked before the weights load: this directory has none, which would otherwise be the error.
  expect_error(run("generate --model " + dir_.path() + " --ids 5,6 --max-new-tokens 255"),
               "context length exceeded: 2 prompt tokens + 255 requested new tokens" + limit, "before loading");
  expect_error(run("logits " + model_flags() + " --ids " + repeated_ids(300) + " --out " + dir_.file("x.safetensors")),
               "context length exceeded: 300 prompt tokens + 0 requested new tokens" + limit, "logits 300");
  for (const std::string count : {"99999999999", "9223372036854775807"}) {
    expect_error(run("generate " + model_flags() + " --ids 5 --max-new-tokens " + count),
                 "context length exceeded: 1 prompt tokens + " + count + " requested new tokens" + limit, count);
  }
  expect_error(run("generate " + model_flags() + " --ids 5 --max-new-tokens 99999999999999999999"),
               "flag --max-new-tokens: 99999999999999999999 is outside the 64-bit integer range", "past int64");
  expect_error(run("generate " + model_flags() + " --ids 5 --max-new-tokens -1"),
               "the number of new tokens must be >= 0, got -1", "negative");
  expect_error(run("bench-one-batch " + model_flags() + " --input-len 8 --output-len 9223372036854775807"),
               "--input-len + --output-len: context length exceeded: 8 prompt tokens + 9223372036854775807", "bench");
  // Exactly the context length still runs.
  RunResult full =
      run("generate " + model_flags() + " --ids " + repeated_ids(254) + " --max-new-tokens 2 --ignore-eos");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_EQ(std::count(full.output.begin(), full.output.end(), ','), 1) << full.output;
}

TEST_F(Cli, HugeBatchSizesAndThreadCountsGiveRangeErrors) {
  expect_error(run("bench-one-batch " + model_flags() + " --batch-size 99999999 --input-len 8 --output-len 2"),
               "--batch-size values must be in [1, 4096], got 99999999", "batch size");
  expect_error(run("bench-one-batch " + model_flags() + " --batch-size 4096 --input-len 8 --output-len 2"
                   " --page-size 9223372036854775807"), "exceeds the 32-bit KV slot ids", "page size");
  for (const std::string threads : {"100000", "-1"}) {
    expect_error(run("generate " + model_flags() + " --ids 5 --max-new-tokens 1 --threads " + threads),
                 "--threads must be in [0, 1024] (0 = all cores), got " + threads, "threads " + threads);
  }
}

TEST_F(Cli, FailedOutputWritesExitNonZero) {
  expect_error(run_with_full_stdout("generate " + model_flags() + " --ids 5 --max-new-tokens 2"),
               "fathom generate: error: failed writing to stdout: No space left on device", "generate stdout");
  // A bad path fails before the model runs (no "Warmup ..." printed).
  RunResult missing = run("bench-one-batch " + model_flags() + " --input-len 6 --output-len 2 --result-filename " +
                          dir_.file("missing/r.jsonl"));
  expect_error(missing, "--result-filename: cannot open " + dir_.file("missing/r.jsonl") +
                            " for writing: No such file or directory", "bench result path");
  EXPECT_EQ(missing.output.find("Warmup ..."), std::string::npos) << missing.output;
  RunResult missing_profile = run("bench-one-batch " + model_flags() + " --batch-size 1,2 --input-len 6 --output-len 2 " +
                                  "--profile " + dir_.file("missing/p"));
  expect_error(missing_profile, "--profile: cannot open " + dir_.file("missing/p") + "-bs1.trace.json for writing",
               "bench profile path");
  EXPECT_EQ(missing_profile.output.find("Warmup ..."), std::string::npos) << missing_profile.output;
  expect_error(run("bench-one-batch " + model_flags() + " --input-len 6 --output-len 2 --result-filename /dev/full"),
               "--result-filename: failed writing /dev/full: No space left on device", "bench /dev/full");
  expect_error(run("logits " + model_flags() + " --ids 5 --out " + dir_.file("missing/x.safetensors")),
               "--out: cannot open", "logits path");
  expect_error(run("logits " + model_flags() + " --ids 5 --out /dev/full"), "failed writing /dev/full", "logits");
  const std::string tokenizer = std::string(FATHOM_SOURCE_DIR) + "/models/fathom-nano";
  if (!std::ifstream(tokenizer + "/tokenizer.json").good()) GTEST_SKIP() << "models/fathom-nano not found";
  using Input = std::pair<std::string, std::string>;  // command, one stdin line
  for (const auto& [command, line] : {Input{"tokenize", "\"hello\""}, Input{"detokenize", "[5, 6]"}}) {
    std::ofstream(dir_.file(command + ".in")) << line << "\n";
    expect_error(run_with_full_stdout(command + " --tokenizer " + tokenizer + " < " + dir_.file(command + ".in")),
                 "fathom " + command + ": error: failed writing to stdout: No space left on device", command);
  }
}

// The hash of the greedy tokens a run printed ("Output. greedy token hash: H").
std::string greedy_hash(const std::string& output) {
  const std::string marker = "Output. greedy token hash: ";
  const size_t at = output.rfind(marker);
  return at == std::string::npos ? "" : output.substr(at + marker.size(), 16);
}

TEST_F(Cli, BenchOneBatchChunkedPrefillPicksTheSameTokens) {
  // Prompts of 6 tokens in forwards of 4: sequence 0 cut after 4 tokens, two of the five forwards end no prompt;
  // forwards of 1 token, fewer than a decode step's 3.
  for (const std::string mtp : {"", " --mtp"}) {
    RunResult whole = run("bench-one-batch " + model_flags() + " --batch-size 3 --input-len 6 --output-len 4" + mtp);
    ASSERT_EQ(whole.exit_code, 0) << whole.output;
    const std::string expected = greedy_hash(whole.output);
    ASSERT_EQ(expected.size(), 16u) << whole.output;
    for (const char* chunk : {"4", "5", "1"}) {
      RunResult chunked = run("bench-one-batch " + model_flags() + " --batch-size 3 --input-len 6 --output-len 4" +
                              mtp + " --chunked-prefill-size " + chunk);
      ASSERT_EQ(chunked.exit_code, 0) << chunked.output;
      EXPECT_EQ(greedy_hash(chunked.output), expected) << "chunk " << chunk << mtp << "\n" << chunked.output;
    }
    // Another prompt draw picks other tokens: the hash covers them.
    RunResult other = run("bench-one-batch " + model_flags() + " --batch-size 3 --input-len 6 --output-len 4 --seed 7" + mtp);
    ASSERT_EQ(other.exit_code, 0) << other.output;
    EXPECT_NE(greedy_hash(other.output), expected) << other.output;
  }
}

TEST_F(Cli, BenchOneBatchTimesTheMtpModule) {
  RunResult result = run("bench-one-batch " + model_flags() + " --batch-size 2 --input-len 5 --output-len 3 --mtp" +
                         " --result-filename " + dir_.file("mtp.jsonl"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("MTP.  prefill latency:"), std::string::npos) << result.output;
  std::ifstream results(dir_.file("mtp.jsonl"));
  std::string line;
  std::getline(results, line);
  for (const char* key : {"\"median_mtp_step_latency\"", "\"mtp_prefill_latency\"", "\"deterministic\":false"}) {
    EXPECT_NE(line.find(key), std::string::npos) << key << "\n" << line;
  }
  RunResult without = run("bench-one-batch " + model_flags() + " --input-len 5 --output-len 2 --mtp" +
                          " --override-config '{\"num_nextn_predict_layers\": 0}'");
  EXPECT_NE(without.exit_code, 0);
  EXPECT_NE(without.output.find("--mtp: the model has no MTP module"), std::string::npos) << without.output;
  RunResult cpu_deterministic = run("bench-one-batch " + model_flags() + " --input-len 5 --output-len 2" +
                                    " --enable-deterministic-inference");
  EXPECT_NE(cpu_deterministic.exit_code, 0);
  EXPECT_NE(cpu_deterministic.output.find("--enable-deterministic-inference: the CUDA backend"), std::string::npos)
      << cpu_deterministic.output;
}

// Every command answers --help (and `fathom help CMD`) with its flags and exits 0.
TEST_F(Cli, EveryCommandListsItsFlagsOnHelp) {
  for (const char* command : {"logits", "generate", "bench-one-batch", "eval", "tokenize", "detokenize",
                              "chat-template", "serve", "bench-serving"}) {
    RunResult help = run(std::string(command) + " --help");
    EXPECT_EQ(help.exit_code, 0) << command << ": " << help.output;
    EXPECT_NE(help.output.find(std::string("usage: fathom ") + command), std::string::npos) << help.output;
    EXPECT_NE(help.output.find("flags taking a value:"), std::string::npos) << help.output;
  }
  // serve describes each flag on its own line: none is listed bare.
  RunResult serve = run("serve --help");
  std::istringstream lines(serve.output);
  int described = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  --", 0) != 0) continue;
    EXPECT_NE(line.find_first_not_of(' ', line.find(' ', 2)), std::string::npos) << "no description: " << line;
    ++described;
  }
  EXPECT_GE(described, 30) << serve.output;
  EXPECT_NE(serve.output.find("--context-length                  N: longest prompt + output"), std::string::npos)
      << serve.output;
  RunResult generate = run("help generate");
  EXPECT_EQ(generate.exit_code, 0) << generate.output;
  EXPECT_NE(generate.output.find("--max-new-tokens"), std::string::npos) << generate.output;
  EXPECT_NE(run("help no-such-command").exit_code, 0);
}

// `fathom --version` names the build's commit (git describe of the sources) and its backends.
TEST_F(Cli, VersionNamesTheCommit) {
  for (const char* flag : {"--version", "version"}) {
    RunResult version = run(flag);
    EXPECT_EQ(version.exit_code, 0) << version.output;
    EXPECT_EQ(version.output.rfind("fathom ", 0), 0u) << version.output;
    EXPECT_NE(version.output.find(" (backends: cpu"), std::string::npos) << version.output;
    EXPECT_EQ(version.output.find("fathom  ("), std::string::npos) << version.output;  // a commit, not empty
  }
}

TEST_F(Cli, BadInputGivesAClearErrorAndExitCode) {
  struct Case { std::string args; const char* expected; };
  const Case cases[] = {
      {"logits " + model_flags() + " --ids 1,a --out /tmp/x", "--ids expects a comma-separated list of integers, got 'a'"},
      {"logits " + model_flags() + " --ids 1,999 --out /tmp/x", "token id 999 (at index 1) is outside the vocabulary [0, 300)"},
      {"logits " + model_flags() + " --ids 1 --out /tmp/x --frobnicate", "unknown flag --frobnicate"},
      {"logits --model /nonexistent --ids 1 --out /tmp/x", "cannot open /nonexistent/config.json"},
      {"logits " + model_flags() + " --ids 1 --out /tmp/x --mode fp4", "unknown numeric mode 'fp4'"},
      {"logits " + model_flags() + " --ids 1 --out /tmp/x --override-config '{\"hidden_act\": \"relu\"}'", "unsupported hidden_act 'relu'"},
      {"generate --model " + dir_.path() + " --ids 1", "no *.safetensors files"},
      {"nonsense", "unknown command 'nonsense'"},
  };
  for (const Case& c : cases) {
    RunResult result = run(c.args);
    EXPECT_NE(result.exit_code, 0) << c.args;
    EXPECT_NE(result.output.find(c.expected), std::string::npos) << c.args << "\n" << result.output;
  }
}

}  // namespace
}  // namespace fathom
