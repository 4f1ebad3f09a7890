// Every parser zeroplan runs on a user's file, each fed raw bytes the way that file reaches it. The libFuzzer
// targets (fuzz/fuzzer_main.cpp) and the regression tests (tests/fuzz) share these, so an input the fuzzer kept
// is replayed through exactly the calls that crashed.
//
// Contract of each feed: bad input ends in InputError (the one error the front ends print and exit 2 on); anything
// else escaping (another exception, a sanitizer report, a hang) is a bug. A feed also checks what the parser
// promises about a file it accepted (what model_to_json writes reads back), and throws InvariantBroken otherwise.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace zeroplan::fuzz {

// A file the parser accepted broke a promise the parser makes about it: a bug, never bad input.
class InvariantBroken : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

struct ParserInput {
  std::string name;                    // the fuzz target and corpus folder: fuzz/corpus/NAME, tests/fuzz/data/NAME
  std::string entry_point;             // what it calls, for the report and for people choosing a target
  void (*feed)(std::string_view bytes);
};

// Every parser, in the order of fuzz/CMakeLists.txt. A new file format (checkpoint manifests) adds a feed here,
// its name to ZEROPLAN_FUZZ_TARGETS and seeds under fuzz/corpus/NAME.
const std::vector<ParserInput>& parser_inputs();
// The parser named NAME; throws std::invalid_argument listing the names when there is none.
const ParserInput& parser_input(std::string_view name);

}  // namespace zeroplan::fuzz
