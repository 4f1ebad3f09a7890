// One `zeroplan calibrate`: measures the machine it runs on and writes a cluster description
// (core/cluster_description.h) that plan, simulate and recommend read.
//
// The process the user starts measures everything local to one GPU and to the host: the bf16 GEMM rate curve
// through the executor's cuBLASLt matmul (the square sweep, plus the linear layers of --model), device copy
// bandwidth, pinned PCIe copies each way, the CUDA context's memory, the CPU AdamW rate at the node's thread
// count and at one thread, host memory copy bandwidth, and the disk under --nvme-path. With --gpus N > 1 it then
// starts N ranks the way `zeroplan run --gpus N` does (run/launcher.h: its own ranks over NCCL on the CUDA
// backend, mpirun over MPI on the CPU backend), which measure all-reduce, reduce-scatter and all-gather from
// 1 MiB to 1 GiB through the executor's communicator and hand the points back in a file (--rank-results).
// The CPU backend measures what a CPU can: its fp32 GEMM (Eigen), memory copies (standing for the device's
// memory and for the offload copies: its "device" memory is host memory), MPI collectives, CPU AdamW and disk.
//
// What is not measured (the datasheet peaks, fused-attention and reduction-kernel rates, DeepSpeed's hook
// costs; collectives on one GPU; the disk without --nvme-path) comes from --base when given, else from the
// datasheet table of the GPUs we run on (peaks and HBM bandwidth), else the loader's documented defaults, and
// the file's provenance says which for every field; nothing is invented.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "exec/comm/collective_watchdog.h"

namespace zeroplan {

struct CalibrationOptions {
  std::string out;                        // the cluster description to write
  bool force = false;                     // replace an existing --out
  std::optional<int> gpus;                // default: every local GPU (CUDA), 1 rank (CPU)
  std::string backend = "cuda";           // cuda | cpu
  std::optional<std::string> model;       // its linear layers' GEMM shapes are measured too
  std::optional<std::string> nvme_path;   // disk measurement directory
  std::optional<std::string> name;        // the description's name
  std::optional<std::string> base;        // a cluster (bundled name or file) for the fields not measured
  bool quick = false;                     // a smaller sweep (tests)
  std::optional<std::string> rank_results;  // internal: where rank 0 of a launched world writes its points
  double collective_timeout_s = exec::kDefaultCollectiveTimeoutS;
};

// Returns the exit status (0 written; the ranks' status when they failed). Throws InputError on bad input (the
// message names the flag) and std::runtime_error when a measurement fails.
int run_calibration(const CalibrationOptions& options);

}  // namespace zeroplan
