# Instrumentation for the libFuzzer targets (fuzz/). Included by the top level before any library is added, so that
# the parsers the fuzzers call (core, sim, exec, run) are compiled with coverage feedback (fuzzer-no-link) and with
# AddressSanitizer (out-of-bounds, use after free, leaks) and UndefinedBehaviorSanitizer (signed overflow, bad
# float-to-integer casts, bad shifts...). -fno-sanitize-recover makes every UB report a crash the fuzzer keeps.
# libFuzzer ships with clang only (compiler-rt): https://llvm.org/docs/LibFuzzer.html
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "ZEROPLAN_BUILD_FUZZERS=ON needs clang (libFuzzer is part of clang's compiler-rt): configure "
                      "with CC=clang CXX=clang++ (Debian: clang-14 libclang-rt-14-dev), got ${CMAKE_CXX_COMPILER_ID}")
endif()
set(ZEROPLAN_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
add_compile_options(-fsanitize=fuzzer-no-link ${ZEROPLAN_SANITIZER_FLAGS})
add_link_options(${ZEROPLAN_SANITIZER_FLAGS})
