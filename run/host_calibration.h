// What `zeroplan calibrate` measures on the host (run/calibration.h assembles the cluster description): the CPU
// AdamW of ZeRO-Offload (exec/offload/cpu_adamw.h) at a thread count, host memory copy bandwidth, direct-I/O
// disk reads and writes through the NVMe store (exec/offload/nvme_io.h), and the CPU backend's fp32 GEMM
// (exec/cpu/cpu_ops.h, Eigen). Each figure is the median of its repeats after one untimed run.
#pragma once

#include <cstdint>
#include <string>

namespace zeroplan {

struct HostFacts {
  std::int64_t memory_bytes = 0;           // what a run can use: MemAvailable (run/process_memory.h)
  std::int64_t physical_memory_bytes = 0;  // sysconf _SC_PHYS_PAGES x _SC_PAGE_SIZE
  int logical_cores = 0;          // std::thread::hardware_concurrency
  std::string cpu_model;          // /proc/cpuinfo "model name", or "unknown CPU"
};
// Throws std::runtime_error when the memory size or the core count cannot be read.
HostFacts host_facts();

// Parameters per second that exec::offload::CpuAdamw updates with `threads` threads: fp32 parameters, gradients
// and moments of `parameters` elements, and the bf16 copy that goes back to the GPU written too (ZeRO-Offload's
// step).
double cpu_adamw_params_per_second(std::int64_t parameters, int threads, int repeats);
// Median seconds of one such update of 1,024 parameters with `threads` threads: what a call costs whatever its size.
double cpu_adamw_call_seconds(int threads, int repeats);

// Bytes read plus bytes written per second when `threads` threads each memcpy their share of `bytes`.
double host_copy_bandwidth(std::int64_t bytes, int threads, int repeats);

struct DiskRates {
  double write_bytes_per_second = 0.0;
  double read_bytes_per_second = 0.0;
  std::int64_t available_bytes = 0;  // std::filesystem::space(directory).available before the test
  int queue_depth = 0;
  std::int64_t block_bytes = 0;
};
// Writes then reads back `bytes` in one file under `directory` through NvmeStore (O_DIRECT, io_uring, DeepSpeed's
// aio defaults: 1 MiB blocks, 8 in flight), timing each direction; the file is removed afterwards. A directory
// that is missing, not writable or without direct I/O is an InputError naming --nvme-path.
DiskRates disk_rates(const std::string& directory, std::int64_t bytes, int repeats);

// Median seconds of the CPU backend's fp32 GEMMs (exec::cpu::matmul_forward, out (M, N) = inp (M, K) W^T), or, with
// training_pass, of forward plus matmul_backward (input and weight gradients, no bias).
double cpu_gemm_seconds(std::int64_t m, std::int64_t k, std::int64_t n, bool training_pass, int repeats);

}  // namespace zeroplan
