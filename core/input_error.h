// InputError: the one exception type for bad user input. It carries where the problem is (file, field) and
// what was expected, so every front end can print a one-line error and exit with status 2.
#pragma once

#include <stdexcept>
#include <string>

namespace zeroplan {

class InputError : public std::runtime_error {
 public:
  // source: the file (or "command line", "--flag") the value came from; field: the JSON path or flag name
  // ("hidden", "zero_optimization.stage"); problem: what was wrong and what is expected.
  InputError(std::string source, std::string field, std::string problem);

  const std::string& source() const { return source_; }
  const std::string& field() const { return field_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string source_;
  std::string field_;
  std::string problem_;
};

}  // namespace zeroplan
