#pragma once
// Syntax tree of a parsed template: expressions and statements, each with its source position for errors.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_lexer.h"
#include "chat/jinja_value.h"

namespace fathom::chat::jinja {

enum class ExprKind { Literal, Name, List, Dict, Attribute, Subscript, Call, Filter, Test, Unary, Binary, Compare, Conditional };

struct Expr {
  explicit Expr(ExprKind kind, SourceLocation location) : kind(kind), location(location) {}
  virtual ~Expr() = default;
  ExprKind kind;
  SourceLocation location;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr : Expr {
  LiteralExpr(SourceLocation at, Value value) : Expr(ExprKind::Literal, at), value(std::move(value)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(SourceLocation at, std::string name) : Expr(ExprKind::Name, at), name(std::move(name)) {}
  std::string name;
};

struct ListExpr : Expr {
  ListExpr(SourceLocation at, bool is_tuple) : Expr(ExprKind::List, at), is_tuple(is_tuple) {}
  std::vector<ExprPtr> items;
  bool is_tuple;
};

struct DictExpr : Expr {
  explicit DictExpr(SourceLocation at) : Expr(ExprKind::Dict, at) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct AttributeExpr : Expr {
  AttributeExpr(SourceLocation at, ExprPtr object, std::string name)
      : Expr(ExprKind::Attribute, at), object(std::move(object)), name(std::move(name)) {}
  ExprPtr object;
  std::string name;
};

// object[index] or object[start:stop:step] (is_slice; absent parts are null).
struct SubscriptExpr : Expr {
  SubscriptExpr(SourceLocation at, ExprPtr object) : Expr(ExprKind::Subscript, at), object(std::move(object)) {}
  ExprPtr object;
  ExprPtr index;
  bool is_slice = false;
  ExprPtr start, stop, step;
};

struct CallExpr : Expr {
  CallExpr(SourceLocation at, ExprPtr callee) : Expr(ExprKind::Call, at), callee(std::move(callee)) {}
  ExprPtr callee;
  Arguments arguments;
};

// `operand | name(args)`; operand is null inside `{% filter %}` and `{% set x | f %}` chains.
struct FilterExpr : Expr {
  FilterExpr(SourceLocation at, ExprPtr operand, std::string name)
      : Expr(ExprKind::Filter, at), operand(std::move(operand)), name(std::move(name)) {}
  ExprPtr operand;
  std::string name;
  Arguments arguments;
};

struct TestExpr : Expr {
  TestExpr(SourceLocation at, ExprPtr operand, std::string name, bool negated)
      : Expr(ExprKind::Test, at), operand(std::move(operand)), name(std::move(name)), negated(negated) {}
  ExprPtr operand;
  std::string name;
  Arguments arguments;
  bool negated;
};

enum class UnaryOp { Not, Negate, Plus };
struct UnaryExpr : Expr {
  UnaryExpr(SourceLocation at, UnaryOp op, ExprPtr operand) : Expr(ExprKind::Unary, at), op(op), operand(std::move(operand)) {}
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp { And, Or, Add, Subtract, Multiply, TrueDivide, FloorDivide, Modulo, Power, Concat };
struct BinaryExpr : Expr {
  BinaryExpr(SourceLocation at, BinaryOp op, ExprPtr left, ExprPtr right)
      : Expr(ExprKind::Binary, at), op(op), left(std::move(left)), right(std::move(right)) {}
  BinaryOp op;
  ExprPtr left, right;
};

enum class CompareOp { Equal, NotEqual, Less, LessEqual, Greater, GreaterEqual, In, NotIn };
// Chained like Python: a < b < c.
struct CompareExpr : Expr {
  CompareExpr(SourceLocation at, ExprPtr first) : Expr(ExprKind::Compare, at), first(std::move(first)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

// `then_expr if condition else else_expr`; else_expr may be null (Undefined).
struct ConditionalExpr : Expr {
  ConditionalExpr(SourceLocation at, ExprPtr condition, ExprPtr then_expr, ExprPtr else_expr)
      : Expr(ExprKind::Conditional, at), condition(std::move(condition)), then_expr(std::move(then_expr)),
        else_expr(std::move(else_expr)) {}
  ExprPtr condition, then_expr, else_expr;
};

enum class NodeKind { Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break, Continue };

struct Node {
  explicit Node(NodeKind kind, SourceLocation location) : kind(kind), location(location) {}
  virtual ~Node() = default;
  NodeKind kind;
  SourceLocation location;
};
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct TextNode : Node {
  TextNode(SourceLocation at, std::string text) : Node(NodeKind::Text, at), text(std::move(text)) {}
  std::string text;
};

struct OutputNode : Node {
  OutputNode(SourceLocation at, ExprPtr expr) : Node(NodeKind::Output, at), expr(std::move(expr)) {}
  ExprPtr expr;
};

struct IfNode : Node {
  explicit IfNode(SourceLocation at) : Node(NodeKind::If, at) {}
  std::vector<std::pair<ExprPtr, NodeList>> branches;  // if, then each elif
  NodeList else_body;
};

// A `set`/`for`/`with` target: a name, a tuple of names to unpack, or `namespace.attribute`.
struct AssignTarget {
  std::vector<std::string> names;
  bool unpack = false;
  std::string namespace_attribute;  // non-empty: names[0] is the namespace variable
};

struct ForNode : Node {
  explicit ForNode(SourceLocation at) : Node(NodeKind::For, at) {}
  AssignTarget target;
  ExprPtr iterable;
  ExprPtr filter;  // `for x in xs if cond`
  NodeList body, else_body;
};

struct SetNode : Node {
  SetNode(SourceLocation at, AssignTarget target, ExprPtr value)
      : Node(NodeKind::Set, at), target(std::move(target)), value(std::move(value)) {}
  AssignTarget target;
  ExprPtr value;
};

// `{% set x | filters %}body{% endset %}`; filters is a FilterExpr chain with a null innermost operand.
struct SetBlockNode : Node {
  explicit SetBlockNode(SourceLocation at) : Node(NodeKind::SetBlock, at) {}
  AssignTarget target;
  ExprPtr filters;
  NodeList body;
};

struct MacroNode : Node {
  explicit MacroNode(SourceLocation at) : Node(NodeKind::Macro, at) {}
  std::string name;
  std::vector<std::string> parameters;
  std::vector<ExprPtr> defaults;  // aligned to the last defaults.size() parameters
  NodeList body;
};

// `{% call(params) macro(args) %}body{% endcall %}`: body is passed as `caller`.
struct CallBlockNode : Node {
  explicit CallBlockNode(SourceLocation at) : Node(NodeKind::CallBlock, at) {}
  std::vector<std::string> parameters;
  std::vector<ExprPtr> defaults;
  ExprPtr call;
  NodeList body;
};

struct FilterBlockNode : Node {
  explicit FilterBlockNode(SourceLocation at) : Node(NodeKind::FilterBlock, at) {}
  ExprPtr filters;
  NodeList body;
};

struct WithNode : Node {
  explicit WithNode(SourceLocation at) : Node(NodeKind::With, at) {}
  std::vector<std::pair<AssignTarget, ExprPtr>> assignments;
  NodeList body;
};

struct LoopControlNode : Node {
  LoopControlNode(SourceLocation at, bool is_break) : Node(is_break ? NodeKind::Break : NodeKind::Continue, at) {}
};

struct TemplateAst {
  NodeList body;
};

}  // namespace fathom::chat::jinja
