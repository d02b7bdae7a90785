#pragma once
// Typed access to the fields of a JSON request object. Absent and null fields read as "not given"; a field
// of the wrong type or out of range throws ApiError(400) naming the field, e.g.
// "Invalid type for 'temperature': expected a number, but got a string instead."
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fathom::server {

using Json = nlohmann::ordered_json;

class JsonFields {
 public:
  // `prefix` qualifies field names in messages ("sampling_params." -> 'sampling_params.top_k').
  explicit JsonFields(const Json& object, std::string prefix = "");

  bool has(const std::string& name) const { return get(name) != nullptr; }
  const Json* get(const std::string& name) const;  // nullptr when absent or null
  std::string qualified(const std::string& name) const { return prefix_ + name; }

  std::optional<double> number(const std::string& name) const;
  std::optional<int64_t> integer(const std::string& name) const;  // integral numbers only (3.0 is accepted)
  std::optional<bool> boolean(const std::string& name) const;
  std::optional<std::string> string(const std::string& name) const;
  // A string or an array of strings (e.g. "stop").
  std::optional<std::vector<std::string>> string_or_strings(const std::string& name) const;
  std::optional<std::vector<int32_t>> int32_list(const std::string& name) const;
  const Json* object(const std::string& name) const;
  const Json* array(const std::string& name) const;

  // Range checks that throw ApiError naming the field.
  void require_range(const std::string& name, double value, double min_value, double max_value) const;
  void require_at_least(const std::string& name, int64_t value, int64_t min_value) const;

  // Throws for a field outside `known` (where a typo should not silently change sampling).
  void reject_unknown(const std::set<std::string>& known) const;

  [[noreturn]] void type_error(const std::string& name, const char* expected, const Json& actual) const;

 private:
  const Json& object_;
  std::string prefix_;
};

// "a string", "an array", ... for messages.
const char* json_type_phrase(const Json& value);

}  // namespace fathom::server
