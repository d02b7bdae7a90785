// Engine behaviour case by case: tests/chat/data/engine_cases.json holds templates, contexts and the output
// (or error) that Jinja2 configured like transformers produces; tools/chat/check_engine_cases.py re-checks
// those expectations against Jinja2.
#include <gtest/gtest.h>

#include "chat/jinja_evaluator.h"
#include "chat/jinja_json.h"
#include "chat/jinja_parser.h"
#include "chat/template_error.h"
#include "core/error.h"
#include "test_support.h"

namespace fathom::chat::jinja {
namespace {

struct EngineCase {
  std::string name;
  std::string template_source;
  nlohmann::ordered_json context;
  bool expect_error = false;
  std::string expected;
  std::string error_contains;
};

std::vector<EngineCase> load_engine_cases() {
  std::vector<EngineCase> cases;
  auto json = testing::read_json(testing::chat_test_data_dir() + "/engine_cases.json");
  for (const auto& entry : json) {
    EngineCase c;
    c.name = entry.at("name").get<std::string>();
    c.template_source = entry.at("template").get<std::string>();
    c.context = entry.value("context", nlohmann::ordered_json::object());
    c.expect_error = entry.value("error", false);
    c.expected = entry.value("expected", "");
    c.error_contains = entry.value("error_contains", "");
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string render(const std::string& source, const nlohmann::ordered_json& context) {
  TemplateAst ast = parse_template(source);
  check_filter_and_test_names(ast);
  Value context_value = value_from_json(context);
  return render_template(ast, context_value.as_dict());
}

// Readable parameter names in failure output instead of byte dumps.
void PrintTo(const EngineCase& c, std::ostream* os) { *os << c.name; }

class EngineCaseTest : public ::testing::TestWithParam<EngineCase> {};

TEST_P(EngineCaseTest, MatchesJinja2) {
  const EngineCase& c = GetParam();
  if (!c.expect_error) {
    EXPECT_EQ(render(c.template_source, c.context), c.expected) << "template: " << c.template_source;
    return;
  }
  try {
    std::string output = render(c.template_source, c.context);
    FAIL() << "expected an error, rendered: " << output;
  } catch (const fathom::Error& error) {
    EXPECT_NE(std::string(error.what()).find(c.error_contains), std::string::npos)
        << "error was: " << error.what() << "\nexpected it to contain: " << c.error_contains;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, EngineCaseTest, ::testing::ValuesIn(load_engine_cases()),
                         [](const ::testing::TestParamInfo<EngineCase>& info) { return info.param.name; });

TEST(JinjaEngine, CaseFileIsNotEmpty) { EXPECT_GT(load_engine_cases().size(), 80u); }

TEST(JinjaEngine, RaiseExceptionCarriesTheTemplateMessageAndLine) {
  try {
    render("first line\n{{ raise_exception('Conversation roles must alternate') }}", nlohmann::ordered_json::object());
    FAIL() << "expected TemplateRaisedError";
  } catch (const TemplateRaisedError& error) {
    EXPECT_STREQ(error.what(), "Conversation roles must alternate");
    EXPECT_EQ(error.template_line(), 2);
  }
}

TEST(JinjaEngine, RuntimeErrorNamesLineAndColumn) {
  try {
    render("a\nbc {{ 1 + 'x' }}", nlohmann::ordered_json::object());
    FAIL() << "expected an error";
  } catch (const fathom::Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("line 2, column 9"), std::string::npos) << message;  // the `+`
    EXPECT_NE(message.find("unsupported operand"), std::string::npos) << message;
  }
}

TEST(JinjaEngine, TemplateIsReusableAcrossRenders) {
  TemplateAst ast = parse_template("{% set ns = namespace(n=0) %}{% for i in items %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}");
  auto context_for = [](int count) {
    nlohmann::ordered_json items = nlohmann::ordered_json::array();
    for (int i = 1; i <= count; ++i) items.push_back(i);
    return value_from_json(nlohmann::ordered_json{{"items", items}});
  };
  EXPECT_EQ(render_template(ast, context_for(3).as_dict()), "6");
  EXPECT_EQ(render_template(ast, context_for(4).as_dict()), "10");  // no state left from the first render
}

TEST(JinjaEngine, DeepNestingRendersWithoutIssue) {
  std::string source;
  for (int i = 0; i < 50; ++i) source += "{% if true %}";
  source += "deep";
  for (int i = 0; i < 50; ++i) source += "{% endif %}";
  EXPECT_EQ(render(source, nlohmann::ordered_json::object()), "deep");
}

}  // namespace
}  // namespace fathom::chat::jinja
