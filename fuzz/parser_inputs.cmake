# The parsers the fuzzers reach (fuzz/parser_inputs.cpp), and zeroplan_fuzz_inputs, the library feeding each raw
# bytes. Included by fuzz/ (the libFuzzer targets) and tests/fuzz (the regression tests that replay seeds and
# findings with the ordinary compiler).
include_guard(GLOBAL)

# Adding a parser: a feed in parser_inputs.cpp's table, its name here, seeds in fuzz/corpus/NAME.
set(ZEROPLAN_FUZZ_TARGETS model_description hf_config cluster_description deepspeed_config token_data run_report
    plan_inputs checkpoint_manifest)
# Real files of the repository that seed a target besides fuzz/corpus/NAME: read where they live, so the seeds
# follow each format as it changes.
set(ZEROPLAN_FUZZ_SEEDS_model_description models tests/core/data/hf)
set(ZEROPLAN_FUZZ_SEEDS_hf_config tests/core/data/hf)
set(ZEROPLAN_FUZZ_SEEDS_cluster_description configs/clusters)
set(ZEROPLAN_FUZZ_SEEDS_deepspeed_config configs/deepspeed)
set(ZEROPLAN_FUZZ_SEEDS_run_report tests/gui/data)

# fuzz-targets.txt, one target a line: its name, then its seed folders (absolute; fuzz/corpus/NAME first). Read by
# scripts/fuzz.sh and tests/fuzz.
set(zeroplan_fuzz_lines "")
foreach(name IN LISTS ZEROPLAN_FUZZ_TARGETS)
  if(NOT IS_DIRECTORY "${PROJECT_SOURCE_DIR}/fuzz/corpus/${name}")
    message(FATAL_ERROR "fuzz target ${name} has no seed corpus: add files under fuzz/corpus/${name}/")
  endif()
  set(line "${name} ${PROJECT_SOURCE_DIR}/fuzz/corpus/${name}")
  foreach(folder IN LISTS ZEROPLAN_FUZZ_SEEDS_${name})
    string(APPEND line " ${PROJECT_SOURCE_DIR}/${folder}")
  endforeach()
  string(APPEND zeroplan_fuzz_lines "${line}\n")
endforeach()
set(ZEROPLAN_FUZZ_TARGETS_FILE "${PROJECT_BINARY_DIR}/fuzz-targets.txt")
file(WRITE "${ZEROPLAN_FUZZ_TARGETS_FILE}" "${zeroplan_fuzz_lines}")

# The parsers outside core/ and sim/ are compiled in from their own files rather than through their libraries,
# which bring the training engine along: exec/token_data.cpp (token files), cli/common_options.cpp (the shared
# flags), gui/run_report.cpp (the GUI's reader of `zeroplan run --report` files, which uses no Qt) and
# run/checkpoint.cpp (checkpoint manifests; zlib for their CRC-32; with run/atomic_file.cpp, its writer).
find_package(ZLIB REQUIRED)
add_library(zeroplan_fuzz_inputs STATIC "${PROJECT_SOURCE_DIR}/fuzz/parser_inputs.cpp"
                                        "${PROJECT_SOURCE_DIR}/exec/token_data.cpp"
                                        "${PROJECT_SOURCE_DIR}/cli/common_options.cpp"
                                        "${PROJECT_SOURCE_DIR}/gui/run_report.cpp"
                                        "${PROJECT_SOURCE_DIR}/run/checkpoint.cpp"
                                        "${PROJECT_SOURCE_DIR}/run/atomic_file.cpp")
target_include_directories(zeroplan_fuzz_inputs PUBLIC "${PROJECT_SOURCE_DIR}")
target_link_libraries(zeroplan_fuzz_inputs PUBLIC zeroplan_sim zeroplan_exec_layout zeroplan_core CLI11::CLI11
                      ZLIB::ZLIB Threads::Threads)
target_compile_options(zeroplan_fuzz_inputs PRIVATE -Wall -Wextra)
