#include "run/fault_injection.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/input_error.h"
#include "exec/comm/mpi_communicator.h"

#ifdef ZEROPLAN_HAVE_MPI
#include <mpi.h>
#endif
#ifdef ZEROPLAN_HAVE_CUDA
#include <cuda_runtime.h>

#include "exec/cuda/cuda_check.h"
#endif

namespace zeroplan {

namespace {

constexpr const char* kExpected = "expected KIND:RANK:STEP with KIND hang, error, oom or exit (test-only)";

bool parse_number(const std::string& text, long long& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  value = std::strtoll(text.c_str(), &end, 10);
  return *end == '\0';
}

const char* to_string(TestFault::Kind kind) {
  switch (kind) {
    case TestFault::Kind::hang: return "hang";
    case TestFault::Kind::error: return "error";
    case TestFault::Kind::oom: return "oom";
    case TestFault::Kind::exit: return "exit";
  }
  return "?";
}

void say(const TestFault& fault, int rank, std::int64_t step) {
  std::fprintf(stderr, "zeroplan run: rank %d: %s=%s: injecting it before step %lld\n", rank, kTestFaultVariable,
               to_string(fault.kind), static_cast<long long>(step));
  std::fflush(stderr);
}

// The bytes of this process's address space now (/proc/self/statm: the first field, in pages).
std::int64_t address_space_bytes() {
  std::ifstream statm("/proc/self/statm");
  long long pages = 0;
  if (!(statm >> pages)) throw std::runtime_error("cannot read /proc/self/statm");
  return static_cast<std::int64_t>(pages) * ::sysconf(_SC_PAGESIZE);
}

// The CPU backend's tensors are std::vector<float> (operator new): cap the address space 64 MiB above what the
// rank uses, allocate a 128 MiB tensor, and let the std::bad_alloc the allocator throws propagate as a real
// exhaustion's would. The cap is lifted before the exception leaves, so the failure path has memory to report.
[[noreturn]] void exhaust_host_memory() {
  rlimit before{};
  if (::getrlimit(RLIMIT_AS, &before) != 0) throw std::runtime_error("getrlimit(RLIMIT_AS) failed");
  rlimit capped = before;
  capped.rlim_cur = static_cast<rlim_t>(address_space_bytes() + (std::int64_t{64} << 20));
  if (::setrlimit(RLIMIT_AS, &capped) != 0) throw std::runtime_error("setrlimit(RLIMIT_AS) failed");
  try {
    std::vector<std::vector<float>> tensors;
    for (;;) tensors.emplace_back(std::size_t{32} << 20);  // 128 MiB each, until refused
  } catch (const std::bad_alloc&) {
    ::setrlimit(RLIMIT_AS, &before);
    throw;
  }
}

}  // namespace

std::optional<TestFault> read_test_fault(int world, std::int64_t steps) {
  const char* value = std::getenv(kTestFaultVariable);
  if (!value) return std::nullopt;
  const std::string text = value;
  const std::size_t first = text.find(':'), second = text.find(':', first == std::string::npos ? first : first + 1);
  if (first == std::string::npos || second == std::string::npos)
    throw InputError(kTestFaultVariable, "value", "'" + text + "': " + kExpected);
  const std::string kind = text.substr(0, first);
  TestFault fault;
  if (kind == "hang") fault.kind = TestFault::Kind::hang;
  else if (kind == "error") fault.kind = TestFault::Kind::error;
  else if (kind == "oom") fault.kind = TestFault::Kind::oom;
  else if (kind == "exit") fault.kind = TestFault::Kind::exit;
  else throw InputError(kTestFaultVariable, "KIND", "unknown '" + kind + "': " + kExpected);
  long long rank = 0, step = 0;
  if (!parse_number(text.substr(first + 1, second - first - 1), rank) || rank < 0 || rank >= world)
    throw InputError(kTestFaultVariable, "RANK", "'" + text + "': expected a rank in [0, " + std::to_string(world) + ")");
  if (!parse_number(text.substr(second + 1), step) || step < 1 || step > steps)
    throw InputError(kTestFaultVariable, "STEP",
                     "'" + text + "': expected a step in [1, " + std::to_string(steps) + "] (--steps)");
  fault.rank = static_cast<int>(rank);
  fault.step = step;
  return fault;
}

void inject_test_fault(const TestFault& fault, int rank, std::int64_t step, const std::string& backend) {
  if (fault.rank != rank || fault.step != step) return;
  say(fault, rank, step);
  switch (fault.kind) {
    case TestFault::Kind::hang:
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    case TestFault::Kind::exit:
      ::raise(SIGKILL);
      break;
    case TestFault::Kind::error:
      if (backend == "cuda") {
#ifdef ZEROPLAN_HAVE_CUDA
        CUDA_CHECK(cudaMemcpy(nullptr, nullptr, 1, static_cast<cudaMemcpyKind>(-1)));
#endif
      } else {
#ifdef ZEROPLAN_HAVE_MPI
        int initialized = 0;
        exec::mpi_check(MPI_Initialized(&initialized), "MPI_Initialized", __FILE__, __LINE__);
        double value = 0;
        // count -1: MPI_ERR_COUNT, returned (not fatal) because the communicator says MPI_ERRORS_RETURN
        if (initialized)
          exec::mpi_check(MPI_Allreduce(MPI_IN_PLACE, &value, -1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
                          "MPI_Allreduce(count -1)", __FILE__, __LINE__);
#endif
      }
      throw std::runtime_error(std::string(kTestFaultVariable) + "=error: the " + backend +
                               " backend's library call did not fail (no MPI world or no CUDA in this rank)");
    case TestFault::Kind::oom:
      if (backend == "cuda") {
#ifdef ZEROPLAN_HAVE_CUDA
        std::size_t free_bytes = 0, total_bytes = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        void* block = nullptr;
        const cudaError_t result = cudaMalloc(&block, free_bytes + (std::size_t{1} << 30));
        cudaGetLastError();  // a failed cudaMalloc leaves the error to be read once
        CUDA_CHECK(result);
        cudaFree(block);
        throw std::runtime_error(std::string(kTestFaultVariable) + "=oom: cudaMalloc of 1 GiB more than the free "
                                 "device memory succeeded");
#endif
      }
      exhaust_host_memory();
  }
}

}  // namespace zeroplan
