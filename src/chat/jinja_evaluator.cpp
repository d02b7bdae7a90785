#include "chat/jinja_evaluator.h"

#include <algorithm>
#include <unordered_map>

#include "chat/jinja_filters.h"
#include "chat/jinja_globals.h"
#include "chat/jinja_operations.h"
#include "chat/jinja_tests.h"
#include "chat/template_error.h"
#include "core/error.h"

namespace fathom::chat::jinja {

namespace {

[[noreturn]] void fail_at(const SourceLocation& location, const std::string& message) {
  FATHOM_FAIL("chat template error at " << describe_location(location) << ": " << message);
}

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}

  const Value* find(const std::string& name) const {
    for (const Scope* scope = this; scope; scope = scope->parent_.get()) {
      auto found = scope->variables_.find(name);
      if (found != scope->variables_.end()) return &found->second;
    }
    return nullptr;
  }
  void set(const std::string& name, Value value) { variables_[name] = std::move(value); }

 private:
  std::shared_ptr<Scope> parent_;
  std::unordered_map<std::string, Value> variables_;
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

// What a macro or a call block's `caller` needs to run its body.
struct MacroDefinition {
  std::string name;
  const std::vector<std::string>* parameters;
  const std::vector<ExprPtr>* defaults;
  const NodeList* body;
};

class Renderer {
 public:
  std::string render(const TemplateAst& ast, const DictData& context) {
    auto globals = std::make_shared<Scope>(nullptr);
    for (auto& [name, function] : make_global_functions()) globals->set(name, std::move(function));
    auto top = std::make_shared<Scope>(globals);
    for (const auto& [key, value] : context.entries) top->set(to_str(key), value);
    std::string out;
    if (render_nodes(ast.body, top, out) != Flow::Normal) FATHOM_FAIL("chat template error: 'break' or 'continue' outside a loop");
    return out;
  }

 private:
  Flow render_nodes(const NodeList& nodes, const ScopePtr& scope, std::string& out) {
    for (const NodePtr& node : nodes) {
      Flow flow = render_node(*node, scope, out);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow render_node(const Node& node, const ScopePtr& scope, std::string& out) {
    try {
      return render_node_unlocated(node, scope, out);
    } catch (const RenderError& error) {
      fail_at(node.location, error.what());
    }
  }

  Flow render_node_unlocated(const Node& node, const ScopePtr& scope, std::string& out) {
    switch (node.kind) {
      case NodeKind::Text: out += static_cast<const TextNode&>(node).text; return Flow::Normal;
      case NodeKind::Output: out += to_str(eval(*static_cast<const OutputNode&>(node).expr, scope)); return Flow::Normal;
      case NodeKind::If: {
        const auto& if_node = static_cast<const IfNode&>(node);
        for (const auto& [test, body] : if_node.branches)
          if (truthy(eval(*test, scope))) return render_nodes(body, scope, out);
        return render_nodes(if_node.else_body, scope, out);
      }
      case NodeKind::For: render_for(static_cast<const ForNode&>(node), scope, out); return Flow::Normal;
      case NodeKind::Set: {
        const auto& set = static_cast<const SetNode&>(node);
        assign(set.target, eval(*set.value, scope), *scope);
        return Flow::Normal;
      }
      case NodeKind::SetBlock: {
        const auto& set = static_cast<const SetBlockNode&>(node);
        Value body = Value::string(render_body(set.body, scope));
        assign(set.target, set.filters ? apply_filter_chain(*set.filters, body, scope) : body, *scope);
        return Flow::Normal;
      }
      case NodeKind::Macro: {
        const auto& macro = static_cast<const MacroNode&>(node);
        scope->set(macro.name, make_macro({macro.name, &macro.parameters, &macro.defaults, &macro.body}, scope));
        return Flow::Normal;
      }
      case NodeKind::CallBlock: render_call_block(static_cast<const CallBlockNode&>(node), scope, out); return Flow::Normal;
      case NodeKind::FilterBlock: {
        const auto& filter = static_cast<const FilterBlockNode&>(node);
        out += to_str(apply_filter_chain(*filter.filters, Value::string(render_body(filter.body, scope)), scope));
        return Flow::Normal;
      }
      case NodeKind::With: {
        const auto& with = static_cast<const WithNode&>(node);
        std::vector<Value> values;
        for (const auto& assignment : with.assignments) values.push_back(eval(*assignment.second, scope));
        auto inner = std::make_shared<Scope>(scope);
        for (size_t i = 0; i < values.size(); ++i) assign(with.assignments[i].first, values[i], *inner);
        return render_nodes(with.body, inner, out);
      }
      case NodeKind::Break: return Flow::Break;
      case NodeKind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  // Renders a body in its own scope, as Jinja does for block set, filter blocks and macros.
  std::string render_body(const NodeList& body, const ScopePtr& scope) {
    std::string out;
    if (render_nodes(body, std::make_shared<Scope>(scope), out) != Flow::Normal)
      throw_render_error("'break' or 'continue' outside a loop");
    return out;
  }

  void assign(const AssignTarget& target, const Value& value, Scope& scope) {
    if (!target.namespace_attribute.empty()) {
      const Value* holder = scope.find(target.names[0]);
      if (!holder || !holder->is_namespace()) throw_render_error("Cannot assign attribute on non-namespace object");
      holder->as_namespace().attributes.set(Value::string(target.namespace_attribute), value);
      return;
    }
    if (!target.unpack) {
      scope.set(target.names[0], value);
      return;
    }
    std::vector<Value> items = iterate(value);
    if (items.size() > target.names.size())
      throw_render_error("too many values to unpack (expected " + std::to_string(target.names.size()) + ")");
    if (items.size() < target.names.size())
      throw_render_error("not enough values to unpack (expected " + std::to_string(target.names.size()) + ", got " +
                         std::to_string(items.size()) + ")");
    for (size_t i = 0; i < items.size(); ++i) scope.set(target.names[i], items[i]);
  }

  void render_for(const ForNode& loop, const ScopePtr& scope, std::string& out) {
    std::vector<Value> items = iterate(eval(*loop.iterable, scope));
    if (loop.filter) {
      std::vector<Value> kept;
      for (Value& item : items) {
        auto probe = std::make_shared<Scope>(scope);
        assign(loop.target, item, *probe);
        if (truthy(eval(*loop.filter, probe))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (render_nodes(loop.else_body, std::make_shared<Scope>(scope), out) != Flow::Normal)
        throw_render_error("'break' or 'continue' outside a loop");
      return;
    }
    auto last_changed = std::make_shared<std::optional<std::vector<Value>>>();
    for (size_t i = 0; i < items.size(); ++i) {
      auto iteration = std::make_shared<Scope>(scope);
      assign(loop.target, items[i], *iteration);
      iteration->set("loop", make_loop_object(items, i, last_changed));
      if (render_nodes(loop.body, iteration, out) == Flow::Break) break;
    }
  }

  static Value make_loop_object(const std::vector<Value>& items, size_t index,
                                const std::shared_ptr<std::optional<std::vector<Value>>>& last_changed) {
    auto count = static_cast<int64_t>(items.size());
    auto i = static_cast<int64_t>(index);
    DictData loop;
    loop.entries.reserve(12);
    auto add = [&](const char* name, Value value) { loop.entries.emplace_back(Value::string(name), std::move(value)); };
    add("index", Value::integer(i + 1));
    add("index0", Value::integer(i));
    add("revindex", Value::integer(count - i));
    add("revindex0", Value::integer(count - i - 1));
    add("first", Value::boolean(i == 0));
    add("last", Value::boolean(i == count - 1));
    add("length", Value::integer(count));
    add("depth", Value::integer(1));
    add("depth0", Value::integer(0));
    add("previtem", i > 0 ? items[index - 1] : Value::undefined("there is no previous item"));
    add("nextitem", i + 1 < count ? items[index + 1] : Value::undefined("there is no next item"));
    add("cycle", Value::callable("cycle", [i](const CallArgs& args) {
          if (args.positional.empty()) throw_render_error("no items for cycling given");
          return args.positional[static_cast<size_t>(i) % args.positional.size()];
        }));
    add("changed", Value::callable("changed", [last_changed](const CallArgs& args) {
          if (last_changed->has_value() && (*last_changed)->size() == args.positional.size()) {
            bool same = true;
            for (size_t k = 0; k < args.positional.size() && same; ++k) same = equals((**last_changed)[k], args.positional[k]);
            if (same) return Value::boolean(false);
          }
          *last_changed = args.positional;
          return Value::boolean(true);
        }));
    return Value::dict(std::move(loop));
  }

  // Macros see the scope they were defined in; weak so a scope holding its own macro is not a cycle.
  Value make_macro(MacroDefinition definition, const ScopePtr& scope) {
    std::weak_ptr<Scope> defining_scope = scope;
    return Value::callable(definition.name, [this, definition, defining_scope](const CallArgs& args) {
      ScopePtr parent = defining_scope.lock();
      if (!parent) throw_render_error("macro '" + definition.name + "' called after its scope ended");
      return call_macro(definition, parent, args);
    });
  }

  Value call_macro(const MacroDefinition& macro, const ScopePtr& parent, const CallArgs& args) {
    // Python stops runaway recursion with RecursionError; we must not overflow the stack either.
    if (macro_depth_ >= kMaxMacroDepth) throw_render_error("macro calls nested more than 256 deep (runaway recursion?)");
    struct DepthGuard {
      int& depth;
      explicit DepthGuard(int& d) : depth(d) { ++depth; }
      ~DepthGuard() { --depth; }
    } guard(macro_depth_);
    auto scope = std::make_shared<Scope>(parent);
    const auto& parameters = *macro.parameters;
    size_t first_default = parameters.size() - macro.defaults->size();
    std::vector<bool> bound(parameters.size(), false);
    std::vector<Value> varargs;
    DictData kwargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < parameters.size()) {
        scope->set(parameters[i], args.positional[i]);
        bound[i] = true;
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    for (const auto& [keyword, value] : args.keyword) {
      auto found = std::find(parameters.begin(), parameters.end(), keyword);
      if (found == parameters.end()) {
        if (keyword == "caller") scope->set("caller", value);
        else kwargs.set(Value::string(keyword), value);
        continue;
      }
      size_t index = static_cast<size_t>(found - parameters.begin());
      if (bound[index]) throw_render_error("macro '" + macro.name + "' got multiple values for argument '" + keyword + "'");
      scope->set(keyword, value);
      bound[index] = true;
    }
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (bound[i]) continue;
      scope->set(parameters[i], i >= first_default ? eval(*(*macro.defaults)[i - first_default], scope)
                                                   : Value::undefined("parameter '" + parameters[i] + "' was not provided"));
    }
    scope->set("varargs", Value::list(std::move(varargs), SequenceKind::Tuple));
    scope->set("kwargs", Value::dict(std::move(kwargs)));
    std::string out;
    if (render_nodes(*macro.body, scope, out) != Flow::Normal) throw_render_error("'break' or 'continue' outside a loop");
    return Value::string(out);
  }

  void render_call_block(const CallBlockNode& node, const ScopePtr& scope, std::string& out) {
    const auto& call = static_cast<const CallExpr&>(*node.call);
    Value callee = eval(*call.callee, scope);
    CallArgs args = eval_arguments(call.arguments, scope);
    args.keyword.emplace_back("caller", make_macro({"caller", &node.parameters, &node.defaults, &node.body}, scope));
    out += to_str(call_value(callee, args));
  }

  CallArgs eval_arguments(const Arguments& arguments, const ScopePtr& scope) {
    CallArgs args;
    args.positional.reserve(arguments.positional.size());
    for (const ExprPtr& argument : arguments.positional) args.positional.push_back(eval(*argument, scope));
    for (const auto& [keyword, argument] : arguments.keyword) args.keyword.emplace_back(keyword, eval(*argument, scope));
    return args;
  }

  // A chain `f | g | h` whose innermost operand is null takes `input` there.
  Value apply_filter_chain(const Expr& chain, const Value& input, const ScopePtr& scope) {
    const auto& filter = static_cast<const FilterExpr&>(chain);
    Value operand = filter.operand ? apply_filter_chain(*filter.operand, input, scope) : input;
    try {
      return apply_filter(filter.name, operand, eval_arguments(filter.arguments, scope));
    } catch (const RenderError& error) {
      fail_at(filter.location, error.what());
    }
  }

  Value eval(const Expr& expr, const ScopePtr& scope) {
    try {
      return eval_unlocated(expr, scope);
    } catch (const RenderError& error) {
      fail_at(expr.location, error.what());
    } catch (const TemplateRaisedError& error) {
      if (error.template_line() != 0) throw;
      throw TemplateRaisedError(error.what(), expr.location.line);
    }
  }

  Value eval_unlocated(const Expr& expr, const ScopePtr& scope) {
    switch (expr.kind) {
      case ExprKind::Literal: return static_cast<const LiteralExpr&>(expr).value;
      case ExprKind::Name: {
        const std::string& name = static_cast<const NameExpr&>(expr).name;
        const Value* found = scope->find(name);
        return found ? *found : Value::undefined("'" + name + "' is undefined");
      }
      case ExprKind::List: {
        const auto& list = static_cast<const ListExpr&>(expr);
        std::vector<Value> items;
        items.reserve(list.items.size());
        for (const ExprPtr& item : list.items) items.push_back(eval(*item, scope));
        return Value::list(std::move(items), list.is_tuple ? SequenceKind::Tuple : SequenceKind::List);
      }
      case ExprKind::Dict: {
        DictData dict;
        for (const auto& [key, value] : static_cast<const DictExpr&>(expr).items) dict.set(eval(*key, scope), eval(*value, scope));
        return Value::dict(std::move(dict));
      }
      case ExprKind::Attribute: {
        const auto& attribute = static_cast<const AttributeExpr&>(expr);
        return get_attribute(eval(*attribute.object, scope), attribute.name);
      }
      case ExprKind::Subscript: return eval_subscript(static_cast<const SubscriptExpr&>(expr), scope);
      case ExprKind::Call: {
        const auto& call = static_cast<const CallExpr&>(expr);
        Value callee = eval(*call.callee, scope);
        return call_value(callee, eval_arguments(call.arguments, scope));
      }
      case ExprKind::Filter: {
        const auto& filter = static_cast<const FilterExpr&>(expr);
        return apply_filter(filter.name, eval(*filter.operand, scope), eval_arguments(filter.arguments, scope));
      }
      case ExprKind::Test: {
        const auto& test = static_cast<const TestExpr&>(expr);
        bool result = apply_test(test.name, eval(*test.operand, scope), eval_arguments(test.arguments, scope));
        return Value::boolean(result != test.negated);
      }
      case ExprKind::Unary: {
        const auto& unary = static_cast<const UnaryExpr&>(expr);
        Value operand = eval(*unary.operand, scope);
        if (unary.op == UnaryOp::Not) return Value::boolean(!truthy(operand));
        return unary.op == UnaryOp::Negate ? negate(operand) : unary_plus(operand);
      }
      case ExprKind::Binary: return eval_binary(static_cast<const BinaryExpr&>(expr), scope);
      case ExprKind::Compare: return eval_compare(static_cast<const CompareExpr&>(expr), scope);
      case ExprKind::Conditional: {
        const auto& conditional = static_cast<const ConditionalExpr&>(expr);
        if (truthy(eval(*conditional.condition, scope))) return eval(*conditional.then_expr, scope);
        if (conditional.else_expr) return eval(*conditional.else_expr, scope);
        return Value::undefined("the inline if-expression on line " + std::to_string(expr.location.line) +
                                " evaluated to false and no else section was defined.");
      }
    }
    throw_render_error("unknown expression");
  }

  Value eval_subscript(const SubscriptExpr& subscript, const ScopePtr& scope) {
    Value object = eval(*subscript.object, scope);
    if (!subscript.is_slice) return get_item(object, eval(*subscript.index, scope));
    auto part = [&](const ExprPtr& expr) { return expr ? std::optional<Value>(eval(*expr, scope)) : std::nullopt; };
    std::optional<Value> start = part(subscript.start), stop = part(subscript.stop), step = part(subscript.step);
    return slice(object, start, stop, step);
  }

  Value eval_binary(const BinaryExpr& binary, const ScopePtr& scope) {
    Value left = eval(*binary.left, scope);
    switch (binary.op) {
      case BinaryOp::And: return truthy(left) ? eval(*binary.right, scope) : left;
      case BinaryOp::Or: return truthy(left) ? left : eval(*binary.right, scope);
      case BinaryOp::Concat: return Value::string(to_str(left) + to_str(eval(*binary.right, scope)));
      default: break;
    }
    Value right = eval(*binary.right, scope);
    switch (binary.op) {
      case BinaryOp::Add: return arithmetic(ArithmeticOp::Add, left, right);
      case BinaryOp::Subtract: return arithmetic(ArithmeticOp::Subtract, left, right);
      case BinaryOp::Multiply: return arithmetic(ArithmeticOp::Multiply, left, right);
      case BinaryOp::TrueDivide: return arithmetic(ArithmeticOp::TrueDivide, left, right);
      case BinaryOp::FloorDivide: return arithmetic(ArithmeticOp::FloorDivide, left, right);
      case BinaryOp::Modulo: return arithmetic(ArithmeticOp::Modulo, left, right);
      case BinaryOp::Power: return arithmetic(ArithmeticOp::Power, left, right);
      default: throw_render_error("unknown binary operator");
    }
  }

  Value eval_compare(const CompareExpr& compare, const ScopePtr& scope) {
    Value left = eval(*compare.first, scope);
    for (const auto& [op, right_expr] : compare.rest) {
      Value right = eval(*right_expr, scope);
      bool holds = false;
      switch (op) {
        case CompareOp::Equal: holds = equals(left, right); break;
        case CompareOp::NotEqual: holds = !equals(left, right); break;
        case CompareOp::Less: holds = compare_order(left, right, "<") < 0; break;
        case CompareOp::LessEqual: holds = compare_order(left, right, "<=") <= 0; break;
        case CompareOp::Greater: holds = compare_order(left, right, ">") > 0; break;
        case CompareOp::GreaterEqual: holds = compare_order(left, right, ">=") >= 0; break;
        case CompareOp::In: holds = contains(right, left); break;
        case CompareOp::NotIn: holds = !contains(right, left); break;
      }
      if (!holds) return Value::boolean(false);
      left = std::move(right);
    }
    return Value::boolean(true);
  }

  static constexpr int kMaxMacroDepth = 256;
  int macro_depth_ = 0;
};

// ---- load-time name checks ----

void check_expr(const Expr* expr);

void check_arguments(const Arguments& arguments) {
  for (const ExprPtr& argument : arguments.positional) check_expr(argument.get());
  for (const auto& keyword : arguments.keyword) check_expr(keyword.second.get());
}

void check_expr(const Expr* expr) {
  if (!expr) return;
  switch (expr->kind) {
    case ExprKind::Literal:
    case ExprKind::Name: return;
    case ExprKind::List:
      for (const ExprPtr& item : static_cast<const ListExpr*>(expr)->items) check_expr(item.get());
      return;
    case ExprKind::Dict:
      for (const auto& [key, value] : static_cast<const DictExpr*>(expr)->items) {
        check_expr(key.get());
        check_expr(value.get());
      }
      return;
    case ExprKind::Attribute: check_expr(static_cast<const AttributeExpr*>(expr)->object.get()); return;
    case ExprKind::Subscript: {
      const auto* subscript = static_cast<const SubscriptExpr*>(expr);
      for (const Expr* part : {subscript->object.get(), subscript->index.get(), subscript->start.get(),
                               subscript->stop.get(), subscript->step.get()})
        check_expr(part);
      return;
    }
    case ExprKind::Call: {
      const auto* call = static_cast<const CallExpr*>(expr);
      check_expr(call->callee.get());
      check_arguments(call->arguments);
      return;
    }
    case ExprKind::Filter: {
      const auto* filter = static_cast<const FilterExpr*>(expr);
      if (!is_known_filter(filter->name)) fail_at(filter->location, "no filter named '" + filter->name + "'");
      check_expr(filter->operand.get());
      check_arguments(filter->arguments);
      return;
    }
    case ExprKind::Test: {
      const auto* test = static_cast<const TestExpr*>(expr);
      if (!is_known_test(test->name)) fail_at(test->location, "no test named '" + test->name + "'");
      check_expr(test->operand.get());
      check_arguments(test->arguments);
      return;
    }
    case ExprKind::Unary: check_expr(static_cast<const UnaryExpr*>(expr)->operand.get()); return;
    case ExprKind::Binary:
      check_expr(static_cast<const BinaryExpr*>(expr)->left.get());
      check_expr(static_cast<const BinaryExpr*>(expr)->right.get());
      return;
    case ExprKind::Compare: {
      const auto* compare = static_cast<const CompareExpr*>(expr);
      check_expr(compare->first.get());
      for (const auto& entry : compare->rest) check_expr(entry.second.get());
      return;
    }
    case ExprKind::Conditional: {
      const auto* conditional = static_cast<const ConditionalExpr*>(expr);
      check_expr(conditional->condition.get());
      check_expr(conditional->then_expr.get());
      check_expr(conditional->else_expr.get());
      return;
    }
  }
}

void check_nodes(const NodeList& nodes) {
  for (const NodePtr& node : nodes) {
    switch (node->kind) {
      case NodeKind::Output: check_expr(static_cast<const OutputNode&>(*node).expr.get()); break;
      case NodeKind::If: {
        const auto& if_node = static_cast<const IfNode&>(*node);
        for (const auto& [test, body] : if_node.branches) {
          check_expr(test.get());
          check_nodes(body);
        }
        check_nodes(if_node.else_body);
        break;
      }
      case NodeKind::For: {
        const auto& loop = static_cast<const ForNode&>(*node);
        check_expr(loop.iterable.get());
        check_expr(loop.filter.get());
        check_nodes(loop.body);
        check_nodes(loop.else_body);
        break;
      }
      case NodeKind::Set: check_expr(static_cast<const SetNode&>(*node).value.get()); break;
      case NodeKind::SetBlock:
        check_expr(static_cast<const SetBlockNode&>(*node).filters.get());
        check_nodes(static_cast<const SetBlockNode&>(*node).body);
        break;
      case NodeKind::Macro:
        for (const ExprPtr& value : static_cast<const MacroNode&>(*node).defaults) check_expr(value.get());
        check_nodes(static_cast<const MacroNode&>(*node).body);
        break;
      case NodeKind::CallBlock:
        check_expr(static_cast<const CallBlockNode&>(*node).call.get());
        check_nodes(static_cast<const CallBlockNode&>(*node).body);
        break;
      case NodeKind::FilterBlock:
        check_expr(static_cast<const FilterBlockNode&>(*node).filters.get());
        check_nodes(static_cast<const FilterBlockNode&>(*node).body);
        break;
      case NodeKind::With:
        for (const auto& assignment : static_cast<const WithNode&>(*node).assignments) check_expr(assignment.second.get());
        check_nodes(static_cast<const WithNode&>(*node).body);
        break;
      default: break;
    }
  }
}

}  // namespace

std::string render_template(const TemplateAst& ast, const DictData& context) { return Renderer().render(ast, context); }

void check_filter_and_test_names(const TemplateAst& ast) { check_nodes(ast.body); }

}  // namespace fathom::chat::jinja
