#include "core/input_error.h"

namespace zeroplan {

namespace {
std::string format_message(const std::string& source, const std::string& field, const std::string& problem) {
  std::string message = source;
  if (!field.empty()) message += (message.empty() ? "" : ": ") + std::string("field '") + field + "'";
  if (!message.empty()) message += ": ";
  return message + problem;
}
}  // namespace

InputError::InputError(std::string source, std::string field, std::string problem)
    : std::runtime_error(format_message(source, field, problem)),
      source_(std::move(source)),
      field_(std::move(field)),
      problem_(std::move(problem)) {}

}  // namespace zeroplan
