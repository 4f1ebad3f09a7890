// What the MPI tests' two files share (test_zero_mpi.cpp, zero_mpi_offload_test.cpp, one binary run under mpirun):
// the world communicator main() makes, the model the binary runs (--model=llama), and the small model's
// configuration every N-ranks-against-one case starts from.
#pragma once

#include <cstdint>
#include <string>

#include "exec/comm/communicator.h"
#include "exec/exec_config.h"

namespace zeroplan::exec::mpi_test {

extern Communicator* world_comm;
// --model=llama (ctest runs the binary once per model): a Llama-family block instead of GPT-2's.
extern bool llama_model;

std::int64_t vocab();
ModelShape small_shape();
ExecConfig small_config(int stage, std::int64_t grad_accum, std::int64_t bucket_elements);
// A directory for the NVMe swap files of a test at this world size and model, on the build directory's disk; empty
// when that disk has no direct I/O (the caller skips). Defined in zero_mpi_offload_test.cpp.
std::string nvme_dir(const std::string& test);

}  // namespace zeroplan::exec::mpi_test
