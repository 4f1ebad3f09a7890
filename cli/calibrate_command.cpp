#include "cli/calibrate_command.h"

#include <iostream>
#include <memory>

#include "core/input_error.h"
#include "run/calibration.h"

namespace zeroplan {

void add_calibrate_command(CLI::App& app, int* status) {
  auto options = std::make_shared<CalibrationOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Measure this machine (GEMM rates, collectives between its GPUs, pinned PCIe copies, CPU AdamW, "
                   "memory and disk bandwidth) and write a cluster description for --cluster FILE");
  cmd->add_option("--out", options->out, "The cluster description to write (JSON)")->required();
  cmd->add_flag("--force", options->force, "Replace --out when it exists");
  cmd->add_option("--gpus", options->gpus,
                  "Ranks to measure the collectives with (default: every local GPU; 1 on the CPU backend)");
  cmd->add_option("--backend", options->backend, "cuda (this machine's GPUs) or cpu (the CPU backend over MPI)")
      ->capture_default_str();
  cmd->add_option("--model", options->model,
                  "A bundled model name or model file: its linear layers' GEMM shapes are measured besides the "
                  "square sweep");
  cmd->add_option("--nvme-path", options->nvme_path,
                  "A directory on the disk to measure (direct I/O reads and writes; its free space is the capacity)");
  cmd->add_option("--name", options->name, "The description's name (default: the GPU and the count)");
  cmd->add_option("--base", options->base,
                  "A cluster (bundled name or file) whose fields stand for what calibrate does not measure");
  cmd->add_flag("--quick", options->quick, "A small sweep (seconds; for tests)");
  cmd->add_option("--collective-timeout", options->collective_timeout_s,
                  "Seconds a collective may wait for the other ranks")
      ->capture_default_str();
  // The ranks' channel back to the process that started them; not for users (run/calibration.h).
  cmd->add_option("--rank-results", options->rank_results)->group("");
  cmd->callback([options, status]() {
    try {
      *status = run_calibration(*options);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      // a failed measurement (CUDA, NCCL, MPI or I/O error): one line, status 2 (main prints InputErrors the same)
      std::cerr << "zeroplan calibrate: error: " << e.what() << '\n';
      *status = 2;
    }
  });
}

}  // namespace zeroplan
