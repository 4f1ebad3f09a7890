# zeroplan_fuzz_inputs: fuzz/parser_inputs.cpp, each parser fed raw bytes. Linked by the libFuzzer targets (fuzz/)
# and by the regression tests that replay what they found (tests/fuzz). The parsers outside core/ and sim/ are
# compiled in from their own files rather than through their libraries, which bring the training engine along:
# exec/token_data.cpp (token files), cli/common_options.cpp (the shared flags) and gui/run_report.cpp (the GUI's
# reader of `zeroplan run --report` files, which uses no Qt).
include_guard(GLOBAL)
add_library(zeroplan_fuzz_inputs STATIC "${PROJECT_SOURCE_DIR}/fuzz/parser_inputs.cpp"
                                        "${PROJECT_SOURCE_DIR}/exec/token_data.cpp"
                                        "${PROJECT_SOURCE_DIR}/cli/common_options.cpp"
                                        "${PROJECT_SOURCE_DIR}/gui/run_report.cpp")
target_include_directories(zeroplan_fuzz_inputs PUBLIC "${PROJECT_SOURCE_DIR}")
target_link_libraries(zeroplan_fuzz_inputs PUBLIC zeroplan_sim zeroplan_core CLI11::CLI11)
target_compile_options(zeroplan_fuzz_inputs PRIVATE -Wall -Wextra)
