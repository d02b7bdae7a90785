#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "core/error.h"

namespace fathom::chat::jinja {

namespace {

using EndNames = std::vector<std::string>;

std::string describe_token(const Token& token) {
  switch (token.type) {
    case TokenType::Data: return "template data";
    case TokenType::VariableBegin: return "'{{'";
    case TokenType::VariableEnd: return "end of expression '}}'";
    case TokenType::BlockBegin: return "'{%'";
    case TokenType::BlockEnd: return "end of statement '%}'";
    case TokenType::String: return "string literal";
    case TokenType::Integer:
    case TokenType::Float: return "number " + token.text;
    case TokenType::End: return "end of template";
    default: return "'" + token.text + "'";
  }
}

std::string quote_list(const EndNames& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? " or '" : "'") + names[i] + "'";
  return out;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  TemplateAst parse() {
    TemplateAst ast;
    ast.body = subparse({});
    if (current().type != TokenType::End) fail(current(), "unexpected " + describe_token(current()));
    return ast;
  }

 private:
  // ---- token stream ----
  const Token& current() const { return tokens_[index_]; }
  const Token& peek() const { return tokens_[std::min(index_ + 1, tokens_.size() - 1)]; }
  const Token& advance() {
    const Token& token = tokens_[index_];
    if (index_ + 1 < tokens_.size()) ++index_;
    return token;
  }
  bool at_operator(std::string_view op) const { return current().type == TokenType::Operator && current().text == op; }
  bool at_name(std::string_view name) const { return current().type == TokenType::Name && current().text == name; }
  bool at_any_name(const EndNames& names) const {
    return current().type == TokenType::Name && std::find(names.begin(), names.end(), current().text) != names.end();
  }
  bool skip_operator(std::string_view op) {
    if (!at_operator(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    advance();
    return true;
  }
  const Token& expect_operator(std::string_view op) {
    if (!at_operator(op)) fail(current(), "expected '" + std::string(op) + "', got " + describe_token(current()));
    return advance();
  }
  const Token& expect_name() {
    if (current().type != TokenType::Name) fail(current(), "expected a name, got " + describe_token(current()));
    return advance();
  }
  const Token& expect(TokenType type, const char* what) {
    if (current().type != type) fail(current(), std::string("expected ") + what + ", got " + describe_token(current()));
    return advance();
  }
  [[noreturn]] void fail(const Token& at, const std::string& message) const {
    FATHOM_FAIL("chat template syntax error at " << describe_location(at.location) << ": " << message);
  }

  // ---- statements ----
  NodeList subparse(const EndNames& end_names) {
    NodeList body;
    while (true) {
      const Token& token = current();
      switch (token.type) {
        case TokenType::Data:
          body.push_back(std::make_unique<TextNode>(token.location, token.text));
          advance();
          break;
        case TokenType::VariableBegin: {
          advance();
          ExprPtr expr = parse_tuple(TupleOptions{});
          expect(TokenType::VariableEnd, "'}}'");
          body.push_back(std::make_unique<OutputNode>(token.location, std::move(expr)));
          break;
        }
        case TokenType::BlockBegin: {
          advance();
          if (!end_names.empty() && at_any_name(end_names)) return body;
          NodeList statements = parse_statement(end_names);
          for (auto& statement : statements) body.push_back(std::move(statement));
          expect(TokenType::BlockEnd, "'%}'");
          break;
        }
        case TokenType::End:
          if (!end_names.empty()) fail(token, "unexpected end of template; expected " + quote_list(end_names));
          return body;
        default: fail(token, "unexpected " + describe_token(token));
      }
    }
  }

  // Body of a block statement: `%}` then statements up to one of end_names (consumed when drop_end).
  NodeList parse_body(const EndNames& end_names, bool drop_end) {
    expect(TokenType::BlockEnd, "'%}'");
    NodeList body = subparse(end_names);
    if (drop_end) advance();
    return body;
  }

  NodeList parse_statement(const EndNames& enclosing_end_names) {
    const Token& token = current();
    if (token.type != TokenType::Name) fail(token, "statement name expected, got " + describe_token(token));
    const std::string& name = token.text;
    NodeList result;
    if (name == "if") {
      result.push_back(parse_if());
    } else if (name == "for") {
      result.push_back(parse_for());
    } else if (name == "set") {
      result.push_back(parse_set());
    } else if (name == "macro") {
      result.push_back(parse_macro());
    } else if (name == "call") {
      result.push_back(parse_call_block());
    } else if (name == "filter") {
      auto node = std::make_unique<FilterBlockNode>(advance().location);
      node->filters = parse_filter_chain(nullptr, true);
      node->body = parse_body({"endfilter"}, true);
      result.push_back(std::move(node));
    } else if (name == "with") {
      result.push_back(parse_with());
    } else if (name == "print") {
      advance();
      while (current().type != TokenType::BlockEnd) {
        if (!result.empty()) expect_operator(",");
        SourceLocation at = current().location;
        result.push_back(std::make_unique<OutputNode>(at, parse_expression(true)));
      }
    } else if (name == "break" || name == "continue") {
      result.push_back(std::make_unique<LoopControlNode>(advance().location, name == "break"));
    } else if (name == "generation") {
      // transformers' {% generation %} only marks assistant spans for masks; it renders its body unchanged.
      advance();
      result = parse_body({"endgeneration"}, true);
    } else if (name == "block" || name == "extends" || name == "include" || name == "import" || name == "from" ||
               name == "autoescape" || name == "do") {
      fail(token, "unsupported statement '" + name + "'");
    } else if (!enclosing_end_names.empty()) {
      fail(token, "unexpected '" + name + "'; expected " + quote_list(enclosing_end_names));
    } else {
      fail(token, "unknown statement '" + name + "'");
    }
    return result;
  }

  NodePtr parse_if() {
    auto node = std::make_unique<IfNode>(advance().location);
    while (true) {
      ExprPtr test = parse_tuple(TupleOptions{.with_condexpr = false, .extra_end_names = {}});
      NodeList body = parse_body({"elif", "else", "endif"}, false);
      node->branches.emplace_back(std::move(test), std::move(body));
      std::string keyword = advance().text;
      if (keyword == "elif") continue;
      if (keyword == "else") node->else_body = parse_body({"endif"}, true);
      break;
    }
    return node;
  }

  NodePtr parse_for() {
    auto node = std::make_unique<ForNode>(advance().location);
    node->target = parse_assign_target({"in"}, false);
    if (!skip_name("in")) fail(current(), "expected 'in' in for loop, got " + describe_token(current()));
    node->iterable = parse_tuple(TupleOptions{.with_condexpr = false, .extra_end_names = {"recursive"}});
    if (skip_name("if")) node->filter = parse_expression(true);
    if (at_name("recursive")) fail(current(), "recursive for loops are not supported");
    node->body = parse_body({"endfor", "else"}, false);
    if (advance().text == "else") node->else_body = parse_body({"endfor"}, true);
    return node;
  }

  NodePtr parse_set() {
    SourceLocation at = advance().location;
    AssignTarget target = parse_assign_target({}, true);
    if (skip_operator("=")) return std::make_unique<SetNode>(at, std::move(target), parse_tuple(TupleOptions{}));
    auto node = std::make_unique<SetBlockNode>(at);
    if (!target.namespace_attribute.empty() || target.unpack) fail(current(), "block set needs a plain variable name");
    node->target = std::move(target);
    node->filters = parse_filter_chain(nullptr, false);
    node->body = parse_body({"endset"}, true);
    return node;
  }

  void parse_signature(std::vector<std::string>& parameters, std::vector<ExprPtr>& defaults) {
    expect_operator("(");
    while (!at_operator(")")) {
      if (!parameters.empty()) expect_operator(",");
      parameters.push_back(expect_name().text);
      if (skip_operator("=")) {
        defaults.push_back(parse_expression(true));
      } else if (!defaults.empty()) {
        fail(current(), "non-default argument follows default argument");
      }
    }
    expect_operator(")");
  }

  NodePtr parse_macro() {
    auto node = std::make_unique<MacroNode>(advance().location);
    node->name = expect_name().text;
    parse_signature(node->parameters, node->defaults);
    node->body = parse_body({"endmacro"}, true);
    return node;
  }

  NodePtr parse_call_block() {
    auto node = std::make_unique<CallBlockNode>(advance().location);
    if (at_operator("(")) parse_signature(node->parameters, node->defaults);
    const Token& call_start = current();
    node->call = parse_expression(true);
    if (node->call->kind != ExprKind::Call) fail(call_start, "expected a macro call after 'call'");
    node->body = parse_body({"endcall"}, true);
    return node;
  }

  NodePtr parse_with() {
    auto node = std::make_unique<WithNode>(advance().location);
    while (current().type != TokenType::BlockEnd) {
      if (!node->assignments.empty()) expect_operator(",");
      AssignTarget target = parse_assign_target({}, false);
      expect_operator("=");
      node->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    node->body = parse_body({"endwith"}, true);
    return node;
  }

  // name | name, name, ... | namespace.attribute (only where with_namespace).
  AssignTarget parse_assign_target(const EndNames& extra_end_names, bool with_namespace) {
    AssignTarget target;
    while (true) {
      const Token& name = expect_name();
      if (name.text == "true" || name.text == "false" || name.text == "none" || name.text == "True" ||
          name.text == "False" || name.text == "None")
        fail(name, "can't assign to constant '" + name.text + "'");
      target.names.push_back(name.text);
      if (with_namespace && target.names.size() == 1 && at_operator(".")) {
        advance();
        target.namespace_attribute = expect_name().text;
        return target;
      }
      if (!at_operator(",")) break;
      advance();
      target.unpack = true;
      if (is_tuple_end(extra_end_names) || at_operator("=")) break;
    }
    return target;
  }

  // ---- expressions ----
  struct TupleOptions {
    bool with_condexpr = true;
    EndNames extra_end_names;
    bool explicit_parentheses = false;
  };

  bool is_tuple_end(const EndNames& extra_end_names) const {
    TokenType type = current().type;
    if (type == TokenType::VariableEnd || type == TokenType::BlockEnd || at_operator(")")) return true;
    return at_any_name(extra_end_names);
  }

  ExprPtr parse_tuple(const TupleOptions& options) {
    SourceLocation at = current().location;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_operator(",");
      if (is_tuple_end(options.extra_end_names)) break;
      items.push_back(parse_expression(options.with_condexpr));
      if (!at_operator(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!options.explicit_parentheses) fail(current(), "expected an expression, got " + describe_token(current()));
    }
    auto tuple = std::make_unique<ListExpr>(at, true);
    tuple->items = std::move(items);
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_conditional() : parse_or(); }

  ExprPtr parse_conditional() {
    ExprPtr expr = parse_or();
    while (at_name("if")) {
      SourceLocation at = advance().location;
      ExprPtr condition = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_conditional() : nullptr;
      expr = std::make_unique<ConditionalExpr>(at, std::move(condition), std::move(expr), std::move(otherwise));
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      SourceLocation at = advance().location;
      left = std::make_unique<BinaryExpr>(at, BinaryOp::Or, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      SourceLocation at = advance().location;
      left = std::make_unique<BinaryExpr>(at, BinaryOp::And, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      SourceLocation at = advance().location;
      return std::make_unique<UnaryExpr>(at, UnaryOp::Not, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    SourceLocation at = current().location;
    ExprPtr first = parse_math1();
    std::vector<std::pair<CompareOp, ExprPtr>> rest;
    while (true) {
      static const std::pair<std::string_view, CompareOp> kOperators[] = {
          {"==", CompareOp::Equal}, {"!=", CompareOp::NotEqual}, {"<", CompareOp::Less},
          {"<=", CompareOp::LessEqual}, {">", CompareOp::Greater}, {">=", CompareOp::GreaterEqual}};
      auto found = std::find_if(std::begin(kOperators), std::end(kOperators),
                                [&](const auto& entry) { return at_operator(entry.first); });
      if (found != std::end(kOperators)) {
        advance();
        rest.emplace_back(found->second, parse_math1());
      } else if (skip_name("in")) {
        rest.emplace_back(CompareOp::In, parse_math1());
      } else if (at_name("not") && peek().type == TokenType::Name && peek().text == "in") {
        advance();
        advance();
        rest.emplace_back(CompareOp::NotIn, parse_math1());
      } else {
        break;
      }
    }
    if (rest.empty()) return first;
    auto compare = std::make_unique<CompareExpr>(at, std::move(first));
    compare->rest = std::move(rest);
    return compare;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_operator("+") || at_operator("-")) {
      BinaryOp op = current().text == "+" ? BinaryOp::Add : BinaryOp::Subtract;
      SourceLocation at = advance().location;
      left = std::make_unique<BinaryExpr>(at, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (at_operator("~")) {
      SourceLocation at = advance().location;
      left = std::make_unique<BinaryExpr>(at, BinaryOp::Concat, std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (true) {
      BinaryOp op;
      if (at_operator("*")) op = BinaryOp::Multiply;
      else if (at_operator("/")) op = BinaryOp::TrueDivide;
      else if (at_operator("//")) op = BinaryOp::FloorDivide;
      else if (at_operator("%")) op = BinaryOp::Modulo;
      else break;
      SourceLocation at = advance().location;
      left = std::make_unique<BinaryExpr>(at, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_operator("**")) {
      SourceLocation at = advance().location;
      left = std::make_unique<BinaryExpr>(at, BinaryOp::Power, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (at_operator("-") || at_operator("+")) {
      UnaryOp op = current().text == "-" ? UnaryOp::Negate : UnaryOp::Plus;
      SourceLocation at = advance().location;
      node = std::make_unique<UnaryExpr>(at, op, parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& token = current();
    SourceLocation at = token.location;
    switch (token.type) {
      case TokenType::Name: {
        std::string name = advance().text;
        if (name == "true" || name == "True") return std::make_unique<LiteralExpr>(at, Value::boolean(true));
        if (name == "false" || name == "False") return std::make_unique<LiteralExpr>(at, Value::boolean(false));
        if (name == "none" || name == "None") return std::make_unique<LiteralExpr>(at, Value::none());
        return std::make_unique<NameExpr>(at, name);
      }
      case TokenType::String: {
        std::string text;
        while (current().type == TokenType::String) text += advance().text;  // adjacent literals concatenate
        return std::make_unique<LiteralExpr>(at, Value::string(std::move(text)));
      }
      case TokenType::Integer: return std::make_unique<LiteralExpr>(at, Value::integer(advance().integer));
      case TokenType::Float: return std::make_unique<LiteralExpr>(at, Value::floating(advance().floating));
      case TokenType::Operator:
        if (token.text == "(") {
          advance();
          ExprPtr inner = parse_tuple(TupleOptions{.with_condexpr = true, .extra_end_names = {}, .explicit_parentheses = true});
          expect_operator(")");
          return inner;
        }
        if (token.text == "[") return parse_list();
        if (token.text == "{") return parse_dict();
        break;
      default: break;
    }
    fail(token, "unexpected " + describe_token(token));
  }

  ExprPtr parse_list() {
    auto list = std::make_unique<ListExpr>(advance().location, false);
    while (!at_operator("]")) {
      if (!list->items.empty()) expect_operator(",");
      if (at_operator("]")) break;
      list->items.push_back(parse_expression(true));
    }
    expect_operator("]");
    return list;
  }

  ExprPtr parse_dict() {
    auto dict = std::make_unique<DictExpr>(advance().location);
    while (!at_operator("}")) {
      if (!dict->items.empty()) expect_operator(",");
      if (at_operator("}")) break;
      ExprPtr key = parse_expression(true);
      expect_operator(":");
      dict->items.emplace_back(std::move(key), parse_expression(true));
    }
    expect_operator("}");
    return dict;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_operator(".") || at_operator("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_operator("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_operator("|")) {
        node = parse_filter_chain(std::move(node), false);
      } else if (at_name("is")) {
        node = parse_test(std::move(node));
      } else if (at_operator("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const Token& opener = advance();
    SourceLocation at = opener.location;
    if (opener.text == ".") {
      const Token& attribute = current();
      if (attribute.type == TokenType::Name) return std::make_unique<AttributeExpr>(at, std::move(object), advance().text);
      if (attribute.type != TokenType::Integer) fail(attribute, "expected a name or number after '.'");
      auto subscript = std::make_unique<SubscriptExpr>(at, std::move(object));
      subscript->index = std::make_unique<LiteralExpr>(attribute.location, Value::integer(advance().integer));
      return subscript;
    }
    auto subscript = std::make_unique<SubscriptExpr>(at, std::move(object));
    // [start:stop:step] or [index]
    if (!at_operator(":")) {
      subscript->index = parse_expression(true);
      if (!at_operator(":")) {
        if (at_operator(",")) fail(current(), "tuple subscripts are not supported");
        expect_operator("]");
        return subscript;
      }
    }
    subscript->is_slice = true;
    subscript->start = std::move(subscript->index);
    expect_operator(":");
    if (!at_operator(":") && !at_operator("]")) subscript->stop = parse_expression(true);
    if (skip_operator(":")) {
      if (!at_operator("]")) subscript->step = parse_expression(true);
    }
    expect_operator("]");
    return subscript;
  }

  Arguments parse_call_arguments() {
    const Token& opener = expect_operator("(");
    Arguments arguments;
    bool need_comma = false;
    while (!at_operator(")")) {
      if (need_comma) {
        expect_operator(",");
        if (at_operator(")")) break;
      }
      if (at_operator("*") || at_operator("**")) fail(current(), "*args and **kwargs in calls are not supported");
      if (current().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == "=") {
        std::string keyword = advance().text;
        advance();
        arguments.keyword.emplace_back(std::move(keyword), parse_expression(true));
      } else {
        if (!arguments.keyword.empty()) fail(opener, "positional argument follows keyword argument");
        arguments.positional.push_back(parse_expression(true));
      }
      need_comma = true;
    }
    expect_operator(")");
    return arguments;
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = std::make_unique<CallExpr>(current().location, std::move(callee));
    call->arguments = parse_call_arguments();
    return call;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name().text;
    while (at_operator(".")) {
      advance();
      name += "." + expect_name().text;
    }
    return name;
  }

  // `| f(args) | g ...`; `start_inline` parses a chain that starts without a pipe ({% filter f %}).
  ExprPtr parse_filter_chain(ExprPtr node, bool start_inline) {
    while (at_operator("|") || start_inline) {
      if (!start_inline) advance();
      SourceLocation at = current().location;
      auto filter = std::make_unique<FilterExpr>(at, std::move(node), parse_dotted_name());
      if (at_operator("(")) filter->arguments = parse_call_arguments();
      node = std::move(filter);
      start_inline = false;
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr operand) {
    SourceLocation at = advance().location;
    bool negated = skip_name("not");
    auto test = std::make_unique<TestExpr>(at, std::move(operand), parse_dotted_name(), negated);
    const Token& next = current();
    bool starts_argument = next.type == TokenType::Name || next.type == TokenType::String ||
                           next.type == TokenType::Integer || next.type == TokenType::Float ||
                           (next.type == TokenType::Operator && (next.text == "[" || next.text == "{"));
    if (at_operator("(")) {
      test->arguments = parse_call_arguments();
    } else if (starts_argument && !at_name("else") && !at_name("or") && !at_name("and")) {
      if (at_name("is")) fail(next, "you cannot chain multiple tests with 'is'");
      test->arguments.positional.push_back(parse_postfix(parse_primary()));
    }
    return test;
  }

  std::vector<Token> tokens_;
  size_t index_ = 0;
};

}  // namespace

TemplateAst parse_template(std::string_view source) { return Parser(tokenize_template(source)).parse(); }

}  // namespace fathom::chat::jinja
