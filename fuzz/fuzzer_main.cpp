// One libFuzzer target: LLVMFuzzerTestOneInput for the parser input named by ZEROPLAN_FUZZ_INPUT (a compile
// definition, one executable per parser; fuzz/CMakeLists.txt). An InputError is the clean answer to bad bytes; any
// other exception is reported with its message and aborts, which libFuzzer records as a crash with its input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <typeinfo>

#include "core/input_error.h"
#include "fuzz/parser_inputs.h"

namespace {
void (*feed)(std::string_view) = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  feed = zeroplan::fuzz::parser_input(ZEROPLAN_FUZZ_INPUT).feed;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    feed(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const zeroplan::InputError& error) {
    // Every InputError must say which file or flag is at fault (the front ends print it as the whole message).
    if (error.source().empty()) {
      std::fprintf(stderr, "zeroplan fuzz: InputError without a source: %s\n", error.what());
      std::abort();
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "zeroplan fuzz: %s escaped the parser (expected InputError): %s\n", typeid(error).name(),
                 error.what());
    std::abort();
  }
  return 0;
}
