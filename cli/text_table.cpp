#include "cli/text_table.h"

#include <algorithm>
#include <stdexcept>

namespace zeroplan {

namespace {

// A cell reads as a number (right-aligned) when it starts with a digit, a sign or a dot.
bool looks_numeric(const std::string& cell) {
  if (cell.empty()) return false;
  const char first = cell[0];
  return (first >= '0' && first <= '9') || ((first == '-' || first == '+' || first == '.') && cell.size() > 1);
}

std::string csv_quote(const std::string& cell) {
  if (cell.find_first_of(",\"\n") == std::string::npos) return cell;
  std::string quoted = "\"";
  for (char c : cell) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

// Display width in terminal columns: count UTF-8 lead bytes, not continuation bytes.
std::size_t display_width(const std::string& text) {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

}  // namespace

TextTable::TextTable(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void TextTable::add_row(std::vector<std::string> cells) {
  if (cells.size() != headers_.size()) throw std::logic_error("TextTable: row width differs from the header's");
  rows_.push_back(std::move(cells));
}

void TextTable::print_text(std::ostream& out) const {
  std::vector<std::size_t> widths(headers_.size());
  for (std::size_t c = 0; c < headers_.size(); ++c) widths[c] = display_width(headers_[c]);
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], display_width(row[c]));
  }
  auto print_row = [&](const std::vector<std::string>& row, bool header) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::size_t pad = widths[c] - display_width(row[c]);
      const bool right = !header && c > 0 && looks_numeric(row[c]);
      if (c > 0) out << "  ";
      if (right) out << std::string(pad, ' ') << row[c];
      else out << row[c] << (c + 1 < row.size() ? std::string(pad, ' ') : "");
    }
    out << '\n';
  };
  print_row(headers_, true);
  std::size_t total = 0;
  for (std::size_t w : widths) total += w;
  out << std::string(total + 2 * (widths.size() - 1), '-') << '\n';
  for (const auto& row : rows_) print_row(row, false);
}

void TextTable::print_csv(std::ostream& out) const {
  auto print_row = [&](const std::vector<std::string>& row) {
    for (std::size_t c = 0; c < row.size(); ++c) out << (c ? "," : "") << csv_quote(row[c]);
    out << '\n';
  };
  print_row(headers_);
  for (const auto& row : rows_) print_row(row);
}

void TextTable::print_markdown(std::ostream& out) const {
  auto print_row = [&](const std::vector<std::string>& row) {
    out << '|';
    for (const auto& cell : row) {
      std::string escaped;
      for (char ch : cell) {
        if (ch == '|') escaped += '\\';
        escaped += ch;
      }
      out << ' ' << escaped << " |";
    }
    out << '\n';
  };
  print_row(headers_);
  out << '|';
  for (std::size_t c = 0; c < headers_.size(); ++c) out << (c == 0 ? " --- |" : " ---: |");
  out << '\n';
  for (const auto& row : rows_) print_row(row);
}

}  // namespace zeroplan
