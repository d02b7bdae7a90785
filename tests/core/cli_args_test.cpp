#include "core/cli_args.h"

#include <cstdint>
#include <functional>

#include <gtest/gtest.h>

#include "core/error.h"

namespace fathom {
namespace {

TEST(CliArgs, ParsesValuesFlagsAndPositionals) {
  CliArgs args({"--model", "dir", "--mtp", "--ids=1,2", "extra"}, {"--model", "--ids"}, {"--mtp"});
  EXPECT_EQ(args.require("--model"), "dir");
  EXPECT_EQ(args.require("--ids"), "1,2");
  EXPECT_TRUE(args.has("--mtp"));
  EXPECT_EQ(args.positional(), std::vector<std::string>{"extra"});
  EXPECT_EQ(parse_int_list("1,2,3", "--ids"), (std::vector<int64_t>{1, 2, 3}));
}

TEST(CliArgs, ErrorsNameTheFlag) {
  try {
    CliArgs args({"--bogus"}, {"--model"}, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown flag --bogus (flags taking a value: --model)"), std::string::npos)
        << e.what();
  }
  try {
    CliArgs args({"--model"}, {"--model"}, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--model needs a value"), std::string::npos);
  }
  try {
    parse_int_list("1,x", "--ids");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--ids expects a comma-separated list of integers, got 'x'"), std::string::npos);
  }
  CliArgs args({"--threads", "abc"}, {"--threads"}, {});
  EXPECT_THROW(args.get_int_or("--threads", 0), Error);
}

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A value flag followed by another of the command's flags is an error (an unset shell variable), not a value; `=`
// passes such a value, and text that only starts with -- is a value.
TEST(CliArgs, AValueFlagDoesNotTakeTheNextFlag) {
  const std::string error =
      error_of([] { CliArgs({"--api-key", "--enable-metrics"}, {"--api-key"}, {"--enable-metrics"}); });
  EXPECT_NE(error.find("flag --api-key needs a value, got the flag --enable-metrics"), std::string::npos) << error;
  EXPECT_NE(error_of([] { CliArgs({"--api-key", "--other=1"}, {"--api-key", "--other"}, {}); }), "");
  CliArgs with_equals({"--api-key=--secret", "--enable-metrics"}, {"--api-key"}, {"--enable-metrics"});
  EXPECT_EQ(with_equals.require("--api-key"), "--secret");
  EXPECT_TRUE(with_equals.has("--enable-metrics"));
  CliArgs negative({"--seed", "-1"}, {"--seed"}, {});
  EXPECT_EQ(negative.get_int_or("--seed", 0), -1);
  CliArgs dashes({"--prompt", "--- title", "--api-key", "--xyz"}, {"--prompt", "--api-key"}, {});
  EXPECT_EQ(dashes.require("--prompt"), "--- title");
  EXPECT_EQ(dashes.require("--api-key"), "--xyz");
}

TEST(CliArgs, RenameFlagsMapsOtherSpellingsInBothForms) {
  const std::vector<std::string> renamed =
      rename_flags({"--model-path", "dir", "--tokenizer-path=tok", "--model-pathx", "value", "--port", "1"},
                   {{"--model-path", "--model"}, {"--tokenizer-path", "--tokenizer"}});
  EXPECT_EQ(renamed, (std::vector<std::string>{"--model", "dir", "--tokenizer=tok", "--model-pathx", "value", "--port",
                                               "1"}));
}

// --help / -h anywhere asks for the command's flags instead of running it.
TEST(CliArgs, HelpListsTheFlags) {
  for (const char* help : {"--help", "-h"}) {
    try {
      CliArgs args({"--model", "m", help}, {"--model", "--ids"}, {"--mtp"});
      FAIL() << help;
    } catch (const HelpRequested& request) {
      EXPECT_EQ(std::string(request.what()), "flags taking a value: --ids, --model; switches: --mtp");
    }
  }
}

TEST(CliArgs, IntegersPastInt64AreErrorsNotSaturated) {
  CliArgs args({"--n", "99999999999999999999", "--max", "9223372036854775807"}, {"--n", "--max"}, {});
  EXPECT_NE(error_of([&] { args.get_int_or("--n", 0); }).find("flag --n: 99999999999999999999 is outside the 64-bit"),
            std::string::npos);
  EXPECT_EQ(args.get_int_or("--max", 0), INT64_MAX);
  EXPECT_NE(error_of([] { parse_int_list("1,-99999999999999999999", "--ids"); }).find("--ids: -99999999999999999999"),
            std::string::npos);
}

TEST(CliArgs, OutputFailuresThrowNamingTheFlagAndPath) {
  EXPECT_NE(error_of([] { open_output_file("/nonexistent-dir/x.json", "--out"); })
                .find("--out: cannot open /nonexistent-dir/x.json for writing: No such file or directory"),
            std::string::npos);
  std::ofstream full = open_output_file("/dev/full", "--out", /*append=*/true);
  full << "data\n";
  EXPECT_NE(error_of([&] { finish_output_file(full, "/dev/full", "--out"); })
                .find("--out: failed writing /dev/full: No space left on device"),
            std::string::npos);
}

}  // namespace
}  // namespace fathom
