// A small table renderer for the CLI's four output shapes that are tables: fixed-width text (numbers right-
// aligned), CSV (RFC 4180 quoting) and GitHub markdown. JSON output is built from the results directly.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace zeroplan {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> headers);

  void add_row(std::vector<std::string> cells);  // must have as many cells as headers
  std::size_t row_count() const { return rows_.size(); }

  void print_text(std::ostream& out) const;
  void print_csv(std::ostream& out) const;
  void print_markdown(std::ostream& out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace zeroplan
