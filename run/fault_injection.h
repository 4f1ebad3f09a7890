// TEST-ONLY fault injection, for the tests that prove a failing rank ends the whole run (tests/run/). Nothing
// happens unless the environment variable ZEROPLAN_TEST_FAULT is set; it is not a user feature and is not in
// --help. Its value is KIND:RANK:STEP: before step STEP (1-based, as the run prints it) rank RANK
//   hang   sleeps forever (its peers wait for it in their next collective until the collective timeout);
//   error  makes a real library call fail: an MPI call with an invalid count on the CPU backend (the error
//          comes back through MPI_ERRORS_RETURN as an MPI error would), a CUDA call with an invalid argument on
//          the CUDA backend;
//   oom    runs out of memory on the backend's allocation path: on the CPU backend the address space is capped
//          just above what the rank uses and a 128 MiB tensor is allocated (std::bad_alloc, as a real
//          exhaustion); on the CUDA backend cudaMalloc asks for more than the device has free;
//   exit   kills itself with SIGKILL, as `kill -9` would.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace zeroplan {

inline constexpr const char* kTestFaultVariable = "ZEROPLAN_TEST_FAULT";

struct TestFault {
  enum class Kind { hang, error, oom, exit };
  Kind kind = Kind::hang;
  int rank = 0;
  std::int64_t step = 1;
};

// Reads ZEROPLAN_TEST_FAULT; nullopt when unset. A malformed value, a rank outside the world or a step outside
// [1, steps] is an InputError naming the variable.
std::optional<TestFault> read_test_fault(int world, std::int64_t steps);

// Called by every rank before each step: does the fault when it is this rank's and this step's, after one
// stderr line saying so. `backend`: "cpu" or "cuda".
void inject_test_fault(const TestFault& fault, int rank, std::int64_t step, const std::string& backend);

}  // namespace zeroplan
