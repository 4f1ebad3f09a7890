#include "core/json_input.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/input_error.h"

namespace zeroplan {

namespace {

// Line and column (both from 1) of a byte offset, as an editor shows them.
std::pair<std::size_t, std::size_t> line_and_column(const std::string& text, std::size_t byte) {
  std::size_t line = 1;
  std::size_t column = 1;
  const std::size_t end = std::min(byte, text.size());
  for (std::size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// nlohmann's messages start with "[json.exception.parse_error.101] parse error at line 3, column 5: "; keep the
// part after the last ": " prefix that carries the position, since we print our own position.
std::string parse_problem(const std::string& what) {
  const std::string marker = "parse error";
  std::string text = what;
  if (const auto at = text.find(marker); at != std::string::npos) text = text.substr(at);
  if (const auto colon = text.find(": "); colon != std::string::npos) text = text.substr(colon + 2);
  return text;
}

std::string describe_value(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  switch (value.type()) {
    case nlohmann::json::value_t::string: return text + " (a string)";
    case nlohmann::json::value_t::boolean: return text + " (a boolean)";
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::object: return "an object";
    default: return text;
  }
}

// The byte offset where the nesting first goes deeper than kMaxJsonDepth, or npos. Brackets inside strings and
// comments do not count; anything malformed is left to the parser, which reports it with its position.
std::size_t too_deep_at(const std::string& text) {
  int depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      const std::size_t end = text.find("*/", i + 2);
      i = end == std::string::npos ? text.size() : end + 1;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}

// 2^63 as a double: the first value a signed 64-bit integer cannot hold.
constexpr double kTwoTo63 = 9223372036854775808.0;

}  // namespace

nlohmann::json read_json_file(const std::filesystem::path& path, bool allow_comments) {
  const std::string source = path.string();
  std::error_code error;
  if (!std::filesystem::exists(path, error)) throw InputError(source, "", "cannot open: no such file");
  if (!std::filesystem::is_regular_file(path, error)) throw InputError(source, "", "cannot open: not a regular file");
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw InputError(source, "", "cannot open: permission denied or unreadable");
  std::ostringstream buffer;
  buffer << stream.rdbuf();
  return parse_json_text(buffer.str(), source, allow_comments);
}

nlohmann::json parse_json_text(const std::string& text, const std::string& source, bool allow_comments) {
  if (const std::size_t at = too_deep_at(text); at != std::string::npos) {
    const auto [line, column] = line_and_column(text, at);
    throw InputError(source, "",
                     "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels of arrays and objects at line " +
                         std::to_string(line) + ", column " + std::to_string(column) +
                         "; expected a zeroplan, DeepSpeed or Hugging Face file (a few levels deep)");
  }
  try {
    return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/allow_comments);
  } catch (const nlohmann::json::parse_error& parse_error) {
    // byte is one past the offending character (nlohmann counts from 1); report that character's position.
    const std::size_t byte = parse_error.byte > 0 ? parse_error.byte - 1 : 0;
    const auto [line, column] = line_and_column(text, byte);
    throw InputError(source, "",
                     "malformed JSON at line " + std::to_string(line) + ", column " + std::to_string(column) +
                         ": " + parse_problem(parse_error.what()) +
                         (!allow_comments && byte < text.size() && text[byte] == '/'
                              ? " (comments are not allowed in this file)"
                              : ""));
  } catch (const nlohmann::json::out_of_range& overflow) {
    // nlohmann 3.11 (Debian 12) refuses a literal such as 1e999 with out_of_range.406 while parsing: a number
    // that is not finite as a double, which every reader refuses anyway.
    // The message quotes the literal ('1e999'): find it to say where it is.
    const std::string what = overflow.what();
    const std::size_t q = what.find('\''), q2 = q == std::string::npos ? q : what.find('\'', q + 1);
    const std::string literal = q2 == std::string::npos ? "" : what.substr(q + 1, q2 - q - 1);
    const std::size_t at = literal.empty() ? std::string::npos : text.find(literal);
    std::string where;
    if (at != std::string::npos) {
      const auto [line, column] = line_and_column(text, at);
      where = " at line " + std::to_string(line) + ", column " + std::to_string(column);
    }
    throw InputError(source, "", "value " + literal + where + " is not a finite number (it overflows a double); "
                                 "expected a finite number");
  }
}

JsonFields::JsonFields(const nlohmann::json& object, std::string source, std::string path_prefix)
    : object_(object), source_(std::move(source)), prefix_(std::move(path_prefix)) {
  if (!object_.is_object()) {
    throw InputError(source_, prefix_.empty() ? "(top level)" : prefix_,
                     "expected a JSON object, got " + describe_value(object_));
  }
}

bool JsonFields::has(const std::string& key) const { return object_.contains(key); }

const nlohmann::json& JsonFields::raw(const std::string& key) const {
  const auto found = object_.find(key);
  if (found == object_.end()) fail(key, "missing (required)");
  return *found;
}

std::string JsonFields::field_path(const std::string& key) const {
  return prefix_.empty() ? key : prefix_ + "." + key;
}

void JsonFields::fail(const std::string& key, const std::string& problem) const {
  throw InputError(source_, field_path(key), problem);
}

namespace {

// The integral value of a JSON number, or an explanation of why it is not one. Floats are accepted only when
// they hold an exact integer (DeepSpeed configs write 5e8); 2.5 is refused rather than truncated.
struct IntegerRead {
  bool ok = false;
  std::int64_t value = 0;
  std::string problem;
};

IntegerRead read_integer(const nlohmann::json& value) {
  IntegerRead read;
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    read.ok = true;
    read.value = value.get<std::int64_t>();
  } else if (value.is_number_unsigned()) {
    const auto unsigned_value = value.get<std::uint64_t>();
    if (unsigned_value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      read.problem = "value " + value.dump() + " overflows a 64-bit integer";
    } else {
      read.ok = true;
      read.value = static_cast<std::int64_t>(unsigned_value);
    }
  } else if (value.is_number_float()) {
    const double number = value.get<double>();
    if (!std::isfinite(number)) {
      read.problem = "value " + value.dump() + " is not a finite number";
    } else if (number >= kTwoTo63 || number < -kTwoTo63) {
      read.problem = "value " + value.dump() + " overflows a 64-bit integer";
    } else if (std::trunc(number) != number) {
      read.problem = "expected an integer, got " + value.dump() + " (not truncated)";
    } else {
      read.ok = true;
      read.value = static_cast<std::int64_t>(number);
    }
  } else {
    read.problem = "expected an integer, got " + describe_value(value);
  }
  return read;
}

}  // namespace

std::int64_t JsonFields::positive_integer(const std::string& key) const {
  const IntegerRead read = read_integer(raw(key));
  if (!read.ok) fail(key, read.problem);
  if (read.value < 1) fail(key, "expected a positive integer (>= 1), got " + std::to_string(read.value));
  return read.value;
}

std::int64_t JsonFields::non_negative_integer(const std::string& key) const {
  const IntegerRead read = read_integer(raw(key));
  if (!read.ok) fail(key, read.problem);
  if (read.value < 0) fail(key, "expected a non-negative integer (>= 0), got " + std::to_string(read.value));
  return read.value;
}

double JsonFields::positive_number(const std::string& key) const {
  const double number = non_negative_number(key);
  if (number <= 0.0) fail(key, "expected a positive number (> 0), got " + raw(key).dump());
  return number;
}

double JsonFields::non_negative_number(const std::string& key) const {
  const nlohmann::json& value = raw(key);
  if (!value.is_number()) fail(key, "expected a number, got " + describe_value(value));
  const double number = value.get<double>();
  if (!std::isfinite(number)) fail(key, "value " + value.dump() + " is not a finite number");
  if (number < 0.0) fail(key, "expected a non-negative number (>= 0), got " + value.dump());
  return number;
}

std::string JsonFields::string(const std::string& key) const {
  const nlohmann::json& value = raw(key);
  if (!value.is_string()) fail(key, "expected a string, got " + describe_value(value));
  return value.get<std::string>();
}

bool JsonFields::boolean(const std::string& key) const {
  const nlohmann::json& value = raw(key);
  if (!value.is_boolean()) fail(key, "expected true or false, got " + describe_value(value));
  return value.get<bool>();
}

JsonFields JsonFields::object(const std::string& key) const {
  const nlohmann::json& value = raw(key);
  if (!value.is_object()) fail(key, "expected a JSON object, got " + describe_value(value));
  return JsonFields(value, source_, field_path(key));
}

std::int64_t JsonFields::positive_integer_or(const std::string& key, std::int64_t fallback) const {
  return has(key) ? positive_integer(key) : fallback;
}

std::int64_t JsonFields::non_negative_integer_or(const std::string& key, std::int64_t fallback) const {
  return has(key) ? non_negative_integer(key) : fallback;
}

double JsonFields::positive_number_or(const std::string& key, double fallback) const {
  return has(key) ? positive_number(key) : fallback;
}

double JsonFields::non_negative_number_or(const std::string& key, double fallback) const {
  return has(key) ? non_negative_number(key) : fallback;
}

std::string JsonFields::string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? string(key) : fallback;
}

bool JsonFields::boolean_or(const std::string& key, bool fallback) const {
  return has(key) ? boolean(key) : fallback;
}

std::string JsonFields::one_of(const std::string& key, const std::vector<std::string>& allowed) const {
  const std::string text = string(key);
  if (std::find(allowed.begin(), allowed.end(), text) != allowed.end()) return text;
  std::string list;
  for (const auto& name : allowed) list += (list.empty() ? "" : ", ") + name;
  fail(key, "unknown value \"" + text + "\"; expected one of " + list);
}

std::vector<std::string> JsonFields::unknown_keys(const std::vector<std::string>& known) const {
  std::vector<std::string> unknown;
  for (const auto& item : object_.items()) {
    if (std::find(known.begin(), known.end(), item.key()) == known.end()) unknown.push_back(item.key());
  }
  return unknown;
}

}  // namespace zeroplan
