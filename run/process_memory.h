// This process's host memory as the kernel counts it (/proc/self/status, proc(5)): the resident-set peak (VmHWM)
// and the resident set now (VmRSS). The run reports the peak per rank beside the planner's host column, which
// counts the offloaded states only: the difference is what the rank process itself holds (CUDA runtime and
// driver, NCCL, libraries, the batch), the term a host verdict needs beside the states (two runs the planner fitted
// in host memory on nvidia-h200-x2 were ended by the kernel's OOM killer).
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace zeroplan
