// Single-thread encode throughput: bench_tokenizer --tokenizer DIR --file F [--runs N] [--per-line]
// Prints the median MB/s over the runs, by wall clock and by this thread's CPU time (steadier on a
// shared machine); tools/tokenizer/make_corpus.{mjs,py} bench measure HF tokenizers the same way.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/cli_args.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  FATHOM_CHECK(file, "cannot open " << path);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

double thread_cpu_seconds() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return double(now.tv_sec) + double(now.tv_nsec) * 1e-9;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (true) {
    size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return lines;
}

int run(int argc, char** argv) {
  fathom::CliArgs cli(std::vector<std::string>(argv + 1, argv + argc), {"--tokenizer", "--file", "--runs"},
                      {"--per-line", "--add-special-tokens"});
  const auto tokenizer = fathom::tokenizer::Tokenizer::load(cli.require("--tokenizer")).with_max_input_bytes(size_t{1} << 32);
  const std::string text = read_file(cli.require("--file"));
  const int runs = static_cast<int>(cli.get_int_or("--runs", 5));
  FATHOM_CHECK(runs > 0, "--runs must be positive");
  const bool per_line = cli.has("--per-line");
  const bool add_special_tokens = cli.has("--add-special-tokens");
  const std::vector<std::string_view> pieces = per_line ? split_lines(text) : std::vector<std::string_view>{text};

  tokenizer.encode("warm up", false);
  std::vector<double> wall_seconds, cpu_seconds;
  size_t token_count = 0;
  for (int run = 0; run < runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = thread_cpu_seconds();
    token_count = 0;
    for (std::string_view piece : pieces) token_count += tokenizer.encode(piece, add_special_tokens).size();
    cpu_seconds.push_back(thread_cpu_seconds() - cpu_start);
    wall_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double megabytes = double(text.size()) / 1e6;
  std::printf("fathom: %.2f MB/s wall, %.2f MB/s cpu (median of %d, %zu bytes, %zu tokens, %s)\n",
              megabytes / median(wall_seconds), megabytes / median(cpu_seconds), runs, text.size(), token_count,
              per_line ? "per line" : "whole file");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_tokenizer: error: %s\n", error.what());
    return 1;
  }
}
