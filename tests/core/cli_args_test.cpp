#include "core/cli_args.h"

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
    EXPECT_NE(std::string(e.what()).find("unknown flag --bogus"), std::string::npos);
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

}  // namespace
}  // namespace fathom
