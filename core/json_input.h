// Reading user JSON with errors that name the file, the field and what was expected. Every loader in core/
// goes through these helpers so that a malformed file never crashes and never silently defaults.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zeroplan {

// Deepest nesting of arrays and objects a file may have. The files zeroplan reads nest a few levels; a bound keeps
// every recursive walk of a parsed document (dump, comparison, destruction) far from the stack's limit.
inline constexpr int kMaxJsonDepth = 100;

// Reads and parses a JSON file. allow_comments accepts // and /* */ comments (DeepSpeed configs carry them).
// Throws InputError: "FILE: cannot open", "FILE: malformed JSON at line L, column C: ...", or "FILE: nested
// deeper than 100 levels at line L, column C".
nlohmann::json read_json_file(const std::filesystem::path& path, bool allow_comments = false);
// The same for text already read; source names it in errors.
nlohmann::json parse_json_text(const std::string& text, const std::string& source, bool allow_comments = false);

// A view of one JSON object that knows where it came from: reads fields with type and range checks.
class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string source, std::string path_prefix = "");

  bool has(const std::string& key) const;
  const nlohmann::json& raw(const std::string& key) const;  // throws when missing
  std::string field_path(const std::string& key) const;     // "zero_optimization.stage"
  const std::string& source() const { return source_; }

  // Required fields: missing, wrong type or out of range -> InputError.
  std::int64_t positive_integer(const std::string& key) const;        // >= 1
  std::int64_t non_negative_integer(const std::string& key) const;    // >= 0
  double positive_number(const std::string& key) const;               // > 0, finite
  double non_negative_number(const std::string& key) const;           // >= 0, finite
  std::string string(const std::string& key) const;
  bool boolean(const std::string& key) const;
  JsonFields object(const std::string& key) const;

  // Optional fields: the fallback is used only when the key is absent; a present but bad value still throws.
  std::int64_t positive_integer_or(const std::string& key, std::int64_t fallback) const;
  std::int64_t non_negative_integer_or(const std::string& key, std::int64_t fallback) const;
  double positive_number_or(const std::string& key, double fallback) const;
  double non_negative_number_or(const std::string& key, double fallback) const;
  std::string string_or(const std::string& key, const std::string& fallback) const;
  bool boolean_or(const std::string& key, bool fallback) const;

  // One of the allowed strings (case-sensitive); the error lists them.
  std::string one_of(const std::string& key, const std::vector<std::string>& allowed) const;

  // Keys present in the object that are not in `known` (for warnings about unknown keys).
  std::vector<std::string> unknown_keys(const std::vector<std::string>& known) const;

  [[noreturn]] void fail(const std::string& key, const std::string& problem) const;

 private:
  const nlohmann::json& object_;
  std::string source_;
  std::string prefix_;
};

}  // namespace zeroplan
