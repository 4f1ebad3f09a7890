// This process's host memory as the kernel counts it (/proc/self/status, proc(5)): the resident-set peak (VmHWM)
// and the resident set now (VmRSS). The run reports the peak per rank beside the planner's host column, which
// counts the offloaded states only: the difference is what the rank process itself holds (CUDA runtime and
// driver, NCCL, libraries, the batch), the term a host verdict needs beside the states (two runs the planner fitted
// in host memory on nvidia-h200-x2 were ended by the kernel's OOM killer).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

namespace zeroplan {

struct ProcessMemory {
  std::int64_t resident_peak_bytes = 0;  // VmHWM
  std::int64_t resident_bytes = 0;       // VmRSS
};

// Reads `status_path` (default /proc/self/status); fields it lacks stay 0. std::runtime_error naming the file
// when it cannot be opened.
ProcessMemory read_process_memory(const std::string& status_path = "/proc/self/status");

// The host memory a new process can use without the system swapping (MemAvailable of `meminfo_path`, default
// /proc/meminfo; proc(5)): what `zeroplan calibrate` writes as the node's host memory, below the physical size by
// what the kernel and other processes hold (0.80 GiB on a fresh 125.9 GiB H100 host, 2026-11-25). std::runtime_error
// naming the file when it cannot be read or has no MemAvailable line (kernels before 3.14).
std::int64_t read_available_host_memory(const std::string& meminfo_path = "/proc/meminfo");

// The variable through which the launcher hands its ranks the node's MemAvailable read before it started them
// (bytes, decimal): the baseline of the node's host memory use, taken before any rank allocated.
inline constexpr const char* kHostAvailableAtLaunchVariable = "ZEROPLAN_HOST_AVAILABLE_AT_LAUNCH";

// Watches the node's available host memory (MemAvailable) from construction to destruction on a thread of its own,
// one read every `period`, and keeps the first and the lowest figure. What the node used at its peak is their
// difference: the offloaded states, each process, and what the kernel and the GPU driver hold for them (page
// tables, the driver's records of pinned pages), which no process's resident set shows. That is the figure the
// kernel's OOM killer acts on (a plan the planner fitted with 1.4 GiB to spare was killed in start-up on
// nvidia-h200-x2, 2026-11-26). A reading that fails (no /proc) leaves the figures at 0.
class HostMemoryWatch {
 public:
  explicit HostMemoryWatch(std::chrono::milliseconds period = std::chrono::milliseconds(20),
                           std::string meminfo_path = "/proc/meminfo");
  ~HostMemoryWatch();
  HostMemoryWatch(const HostMemoryWatch&) = delete;
  HostMemoryWatch& operator=(const HostMemoryWatch&) = delete;

  std::int64_t first_bytes() const { return first_; }                 // read in the constructor
  std::int64_t lowest_bytes() const { return lowest_.load(); }         // the lowest read so far
  std::int64_t samples() const { return samples_.load(); }

 private:
  void sample();
  std::string path_;
  std::int64_t first_ = 0;
  std::atomic<std::int64_t> lowest_{0};
  std::atomic<std::int64_t> samples_{0};
  std::jthread thread_;
};

}  // namespace zeroplan
