// expect_input_error: runs a body and expects an InputError whose one-line message contains every fragment
// (the file, the field, what was expected). Shared by the core test files.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/input_error.h"

namespace zeroplan {

template <typename Body>
void expect_input_error(Body body, std::initializer_list<std::string> fragments) {
  try {
    body();
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& error) {
    for (const auto& fragment : fragments) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos)
          << "message \"" << error.what() << "\" lacks \"" << fragment << "\"";
    }
  }
}

// Whether any line (a note, a warning) contains the fragment.
inline bool any_contains(const std::vector<std::string>& lines, const std::string& fragment) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& line) { return line.find(fragment) != std::string::npos; });
}

}  // namespace zeroplan
