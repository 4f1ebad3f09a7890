#include "run/calibration.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cluster_description.h"
#include "core/input_error.h"
#include "core/json_input.h"
#include "core/model_description.h"
#include "core/units.h"
#include "exec/comm/communicator.h"
#include "exec/comm/mpi_communicator.h"
#include "exec/exec_config.h"
#include "exec/offload/cpu_adamw.h"
#include "run/calibration_description.h"
#include "run/host_calibration.h"
#include "run/host_probe.h"
#include "run/launcher.h"
#include "run/process_memory.h"
#include "run/rank_guard.h"
#include "sim/collective_time.h"
#ifdef ZEROPLAN_HAVE_CUDA
#include "exec/comm/nccl_communicator.h"
#include "exec/cuda/cuda_trainer.h"
#include "exec/cuda/device_calibration.h"
#endif

namespace zeroplan {

namespace {

constexpr const char* kCli = "command line";

std::string size_label(Bytes bytes) {
  if (bytes >= kGiB && bytes % kGiB == 0) return std::to_string(bytes / kGiB) + " GiB";
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " B";
}

// The table printed as the figures come in: what, at which size, the result with its unit.
void row(const std::string& what, const std::string& size, const std::string& result) {
  std::printf("  %-36s %-20s %s\n", what.c_str(), size.c_str(), result.c_str());
  std::fflush(stdout);
}

// The sweep's sizes and repeats. --quick: a few small points, so that CI can run the whole path in seconds.
struct Sweep {
  std::vector<std::int64_t> square_gemm;   // N of the N x N x N GEMMs
  std::int64_t gpu_model_tokens;           // M of the model's linear layers on a GPU
  std::int64_t cpu_model_tokens;           // and on the CPU backend (Eigen fp32: ~100x slower)
  int gemm_repeats;
  Bytes copy_bytes;                        // device copy, pinned copies, host copy
  std::int64_t adamw_parameters;
  Bytes disk_bytes;
  std::vector<Bytes> collective_bytes;     // the full buffer S of each collective, nccl-tests' convention
  Bytes collective_budget;                 // bytes moved per point: iterations = budget / S within [min, max]
  int min_iterations, max_iterations;
  int repeats;
};

Sweep make_sweep(bool quick, bool cpu) {
  Sweep s;
  if (quick) {
    s.square_gemm = cpu ? std::vector<std::int64_t>{64, 128, 256} : std::vector<std::int64_t>{256, 512, 1024, 2048};
    s.gpu_model_tokens = 1024;
    s.cpu_model_tokens = 64;
    s.gemm_repeats = 3;
    s.copy_bytes = 64 * kMiB;
    s.adamw_parameters = std::int64_t{1} << 22;
    s.disk_bytes = 64 * kMiB;
    s.collective_bytes = {1 * kMiB, 4 * kMiB, 16 * kMiB};
    s.collective_budget = 256 * kMiB;
    s.min_iterations = 3;
    s.max_iterations = 20;
    s.repeats = 3;
    return s;
  }
  s.square_gemm = cpu ? std::vector<std::int64_t>{128, 256, 512, 1024, 2048}
                      : std::vector<std::int64_t>{256, 512, 1024, 2048, 4096, 8192};
  // The cluster files' GEMM points are GPT-2 training shapes at 8192 tokens (configs/clusters/h200x2.json).
  s.gpu_model_tokens = 8192;
  s.cpu_model_tokens = 1024;
  s.gemm_repeats = 20;
  s.copy_bytes = kGiB;
  s.adamw_parameters = std::int64_t{1} << 26;
  s.disk_bytes = kGiB;
  // 1 MiB .. 1 GiB, every power of two (nccl-tests' -b 1M -e 1G -f 2).
  for (Bytes b = kMiB; b <= kGiB; b *= 2) s.collective_bytes.push_back(b);
  s.collective_budget = 16 * kGiB;
  s.min_iterations = 5;
  s.max_iterations = 200;
  s.repeats = 5;
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Collectives (each rank of the launched world).

struct CollectivePoint {
  CollectiveKind kind = CollectiveKind::all_reduce;
  int ranks = 0;
  Bytes message_bytes = 0;
  double seconds = 0.0;  // per call, the slowest rank's
  double bus_bandwidth = 0.0;
  int iterations = 0;
};

exec::CommKind comm_kind(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return exec::CommKind::all_reduce;
    case CollectiveKind::reduce_scatter: return exec::CommKind::reduce_scatter;
    case CollectiveKind::all_gather: return exec::CommKind::all_gather;
  }
  throw std::logic_error("unknown collective kind");
}

// Times every collective at every size on `buffer` (host memory on MPI, device memory on NCCL, at least the
// largest size), in place as NCCL defines it (communicator.h). `wait` blocks until the issued calls are done.
// As nccl-tests does (doc/PERFORMANCE.md), a point is warm-up calls, then `iterations` calls back to back timed
// together; busbw = algbw x 2(n-1)/n for all-reduce and x (n-1)/n for reduce-scatter and all-gather, with
// algbw = S / t (sim/collective_time.h bus_bandwidth, the planner's own definition). A collective ends when its
// slowest rank does, so t is the largest of the ranks' times.
std::vector<CollectivePoint> sweep_collectives(exec::Communicator& comm, void* buffer, exec::CommDtype dtype,
                                               const Sweep& sweep, const std::function<void()>& wait) {
  const int n = comm.world();
  const int rank = comm.rank();
  const std::int64_t element = exec::comm_dtype_bytes(dtype);
  auto* base = static_cast<unsigned char*>(buffer);
  std::vector<CollectivePoint> points;
  for (CollectiveKind kind : {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter, CollectiveKind::all_gather}) {
    for (Bytes size : sweep.collective_bytes) {
      // The full buffer must split into n equal blocks of whole elements (reduce-scatter, all-gather).
      const std::int64_t block = size / (element * n);
      if (block < 1) continue;
      const Bytes full = block * element * n;
      auto call = [&] {
        switch (kind) {
          case CollectiveKind::all_reduce: comm.all_reduce_sum(base, base, full / element, dtype); break;
          case CollectiveKind::reduce_scatter:
            comm.reduce_scatter_sum(base, base + rank * block * element, block, dtype);
            break;
          case CollectiveKind::all_gather: comm.all_gather(base + rank * block * element, base, block, dtype); break;
        }
      };
      const int iterations = static_cast<int>(
          std::clamp<std::int64_t>(sweep.collective_budget / full, sweep.min_iterations, sweep.max_iterations));
      for (int i = 0; i < 2; ++i) call();
      wait();
      const std::int64_t counted_before = comm.counters().bytes[static_cast<int>(comm_kind(kind))];
      comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) call();
      wait();
      const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
      // The communicator counts the full buffer of each call on its own (communicator.h); a difference would
      // mean the sizes above are not what crossed the wire.
      const std::int64_t counted = comm.counters().bytes[static_cast<int>(comm_kind(kind))] - counted_before;
      if (counted != full * iterations)
        throw std::logic_error("calibrate: the communicator counted " + std::to_string(counted) + " bytes of " +
                               to_string(kind) + ", expected " + std::to_string(iterations) + " x " +
                               std::to_string(full));
      std::vector<double> times(static_cast<std::size_t>(n), 0.0);
      times[static_cast<std::size_t>(rank)] = mine;
      comm.all_reduce_host(times.data(), n);
      CollectivePoint point;
      point.kind = kind;
      point.ranks = n;
      point.message_bytes = full;
      point.seconds = *std::max_element(times.begin(), times.end());
      point.bus_bandwidth = bus_bandwidth(kind, n, full, point.seconds);
      point.iterations = iterations;
      if (!(point.bus_bandwidth > 0.0) || !std::isfinite(point.bus_bandwidth))
        throw std::runtime_error("calibrate: " + to_string(kind) + " of " + size_label(full) + " took " +
                                 format_number("%g", point.seconds) + " s: no bus bandwidth can be derived");
      row(to_string(kind) + " (" + std::to_string(n) + " ranks)", size_label(full),
          "busbw " + format_number("%.2f", point.bus_bandwidth / 1e9) + " GB/s, " +
              format_number("%.1f", point.seconds * 1e6) + " us");
      points.push_back(point);
    }
  }
  return points;
}

// What each further call costs inside one NCCL group (core/cluster_description.h grouped_call_seconds): the
// ZeRO engine issues a layer's reduce-scatters, a unit's all-gathers and stage 3's persistent tensors as groups of
// a call per bucket (exec/zero/zero_engine.cpp), and nccl-tests times calls one at a time. A group of one call
// and a group of kGroupedCalls calls of kGroupedCallBytes each (distinct parts of `buffer`) are timed as the sweep
// times a point; per kind, (t(k) - t(1)) / (k - 1) less one call's bytes at the largest point's bus bandwidth
// (so that the planner, which times a group's bytes at that rate, does not count them twice). Small calls, as the
// layer lists' buckets are (ResNet-101 at stage 3: a few KB to a few MB).
constexpr int kGroupedCalls = 32;
constexpr Bytes kGroupedCallBytes = 64 * 1024;

nlohmann::json time_grouped_calls(exec::Communicator& comm, void* buffer, Bytes buffer_bytes, exec::CommDtype dtype,
                                  const std::vector<CollectivePoint>& sweep_points, const std::function<void()>& wait) {
  const int n = comm.world();
  const int rank = comm.rank();
  const std::int64_t element = exec::comm_dtype_bytes(dtype);
  const std::int64_t block = kGroupedCallBytes / (element * n);
  const Bytes full = block * element * n;
  if (block < 1 || full * kGroupedCalls > buffer_bytes)
    throw std::logic_error("calibrate: the collective buffer cannot hold the grouped calls");
  auto* base = static_cast<unsigned char*>(buffer);
  nlohmann::json out = nlohmann::json::array();
  for (CollectiveKind kind : {CollectiveKind::reduce_scatter, CollectiveKind::all_gather}) {
    auto group_of = [&](int calls) {
      comm.group_start();
      for (int c = 0; c < calls; ++c) {
        unsigned char* part = base + static_cast<std::int64_t>(c) * full;
        if (kind == CollectiveKind::reduce_scatter)
          comm.reduce_scatter_sum(part, part + rank * block * element, block, dtype);
        else
          comm.all_gather(part + rank * block * element, part, block, dtype);
      }
      comm.group_end();
    };
    auto timed = [&](int calls) {
      constexpr int kIterations = 200;
      for (int i = 0; i < 5; ++i) group_of(calls);
      wait();
      comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kIterations; ++i) group_of(calls);
      wait();
      std::vector<double> times(static_cast<std::size_t>(n), 0.0);
      times[static_cast<std::size_t>(rank)] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kIterations;
      comm.all_reduce_host(times.data(), n);
      return *std::max_element(times.begin(), times.end());
    };
    const double one = timed(1), many = timed(kGroupedCalls);
    double largest_busbw = 0.0;
    Bytes largest = 0;
    for (const CollectivePoint& p : sweep_points)
      if (p.kind == kind && p.message_bytes > largest) largest = p.message_bytes, largest_busbw = p.bus_bandwidth;
    const double bytes_seconds =
        largest_busbw > 0.0 ? static_cast<double>(full) * collective_factor(kind, n) / largest_busbw : 0.0;
    const double per_call = std::max(0.0, (many - one) / (kGroupedCalls - 1) - bytes_seconds);
    row(to_string(kind) + " grouped (" + std::to_string(n) + " ranks)",
        std::to_string(kGroupedCalls) + " x " + size_label(full),
        format_number("%.1f", one * 1e6) + " us alone, " + format_number("%.1f", many * 1e6) + " us grouped: " +
            format_number("%.2f", per_call * 1e6) + " us a further call");
    out.push_back({{"collective", to_string(kind)}, {"ranks", n}, {"message_bytes", full}, {"calls", kGroupedCalls},
                   {"seconds_one", one}, {"seconds_grouped", many}, {"seconds_per_further_call", per_call}});
  }
  return out;
}

nlohmann::json points_to_json(const std::vector<CollectivePoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const CollectivePoint& p : points)
    out.push_back({{"collective", to_string(p.kind)}, {"ranks", p.ranks}, {"message_bytes", p.message_bytes},
                   {"bus_bandwidth", p.bus_bandwidth}, {"seconds", p.seconds}, {"iterations", p.iterations}});
  return out;
}

void write_rank_results(const std::string& path, const nlohmann::json& results) {
  std::ofstream file(path);
  if (!file) throw std::runtime_error("calibrate: cannot write the ranks' results to " + path);
  file << results.dump(2) << '\n';
  if (!file.flush()) throw std::runtime_error("calibrate: writing the ranks' results to " + path + " failed");
}

// One rank of the launched world: the collectives only (the launcher measured everything local).
int calibration_rank(const CalibrationOptions& o, const RankEnvironment& env, std::optional<RankGuard>& guard) {
  const Sweep sweep = make_sweep(o.quick, o.backend == "cpu");
  guard.emplace(env.rank, env.world, /*steps=*/1, o.collective_timeout_s, o.backend);
  guard->before_step(1);
  guard->set_phase("collectives");
  if (env.rank != 0 && !std::freopen("/dev/null", "w", stdout))
    throw std::runtime_error("cannot silence the standard output of rank " + std::to_string(env.rank));
  const Bytes largest = *std::max_element(sweep.collective_bytes.begin(), sweep.collective_bytes.end());
  nlohmann::json results;
  if (o.backend == "cpu") {
    auto comm = exec::make_mpi_communicator(guard->comm_watch());
    // The CPU backend reduces fp32 (mpi_communicator.h); 64-byte aligned as the engine's buffers are.
    std::vector<float> buffer(static_cast<std::size_t>(largest / 4), 1.0f);
    results["link"] = "MPI (" + std::to_string(env.world) + " ranks on one host)";
    const auto points = sweep_collectives(*comm, buffer.data(), exec::CommDtype::f32, sweep, [] {});
    results["points"] = points_to_json(points);
    results["grouped"] = time_grouped_calls(*comm, buffer.data(), largest, exec::CommDtype::f32, points, [] {});
  } else {
#ifdef ZEROPLAN_HAVE_CUDA
    exec::cuda::use_device(env.local_rank);
    exec::cuda::DeviceBuffer buffer(largest);
    // What NCCL itself takes on the device (communicator buffers, channels, proxies): free memory before the
    // communicator exists against after every collective has run once at every size (NCCL sets buffers up lazily).
    // And on the host: the resident set (VmRSS) before and after, NCCL's library state, proxy and bootstrap.
    const std::int64_t free_before = exec::cuda::current_device_free_bytes();
    const std::int64_t resident_before = read_process_memory().resident_bytes;
    auto comm = exec::make_nccl_communicator(env.rank, env.world, env.local_rank, env.nccl_id_hex, nullptr,
                                              guard->comm_watch());
    // bf16, the precision the engine reduces in (as the cluster files' NCCL figures).
    const auto points = sweep_collectives(*comm, buffer.data(), exec::CommDtype::bf16, sweep,
                                          [&] { exec::cuda::synchronize_stream(comm->comm_stream()); });
    const std::int64_t free_after = exec::cuda::current_device_free_bytes();
    const std::int64_t resident_after = read_process_memory().resident_bytes;
    results["link"] = "NCCL " + exec::cuda::nccl_version() + " between " + std::to_string(env.world) + " local GPUs";
    results["points"] = points_to_json(points);
    results["grouped"] = time_grouped_calls(*comm, buffer.data(), largest, exec::CommDtype::bf16, points,
                                            [&] { exec::cuda::synchronize_stream(comm->comm_stream()); });
    results["nccl_buffer_bytes"] = std::max<std::int64_t>(0, free_before - free_after);
    results["nccl_host_bytes"] = std::max<std::int64_t>(0, resident_after - resident_before);
#else
    throw InputError(kCli, "--backend", "this zeroplan was built without the CUDA executor (try --backend cpu)");
#endif
  }
  if (env.rank == 0) write_rank_results(*o.rank_results, results);
  return 0;
}

// ---------------------------------------------------------------------------------------------------------------
// The launcher's side: local measurements and the description.

// The linear layers of one transformer block and the output head: (K, N) with out (M, N) = inp (M, K) W^T at M
// tokens. SwiGLU's gate and up projections share one shape.
struct LinearShape {
  std::string label;
  std::int64_t k = 0, n = 0;
};

std::vector<LinearShape> model_linear_shapes(const ModelDescription& model) {
  if (!model.transformer)
    throw InputError(model.source, "--model",
                     "is a layer list without a transformer shape; calibrate measures the GEMM shapes of a "
                     "transformer's linear layers (give a transformer model, or leave --model out)");
  const TransformerShape& s = *model.transformer;
  std::vector<LinearShape> shapes = {{"qkv projection", s.hidden, s.hidden + 2 * s.kv_dim()},
                                     {"attention output", s.hidden, s.hidden},
                                     {"mlp up", s.hidden, s.ffn_hidden},
                                     {"mlp down", s.ffn_hidden, s.hidden},
                                     // The executor's LM head runs over the vocabulary padded to a multiple of
                                     // 128 (exec/exec_config.h pad_vocab): an odd N such as GPT-2's 50257 runs
                                     // at a sixth of the rate (128.8 against 739 TFLOP/s for the qkv shape on an
                                     // H200, 2026-11-23) and is a shape nothing we plan executes.
                                     {"output head", s.hidden, exec::pad_vocab(s.vocab_size)}};
  std::vector<LinearShape> unique;
  for (const LinearShape& shape : shapes) {
    const bool seen = std::any_of(unique.begin(), unique.end(),
                                  [&](const LinearShape& u) { return u.k == shape.k && u.n == shape.n; });
    if (!seen) unique.push_back(shape);
  }
  return unique;
}

std::string gemm_label(std::int64_t m, std::int64_t k, std::int64_t n) {
  return std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
}

// The GEMM sweep on whichever device `seconds_of(m, k, n, training_pass)` times.
std::vector<GemmPoint> sweep_gemms(const Sweep& sweep, const std::optional<ModelDescription>& model,
                                   std::int64_t model_tokens, const char* precision,
                                   const std::function<double(std::int64_t, std::int64_t, std::int64_t, bool)>& seconds_of) {
  std::vector<GemmPoint> points;
  for (std::int64_t n : sweep.square_gemm) {
    GemmPoint p;
    p.label = std::string(precision) + " GEMM " + gemm_label(n, n, n);
    p.flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    p.seconds = seconds_of(n, n, n, false);
    row(p.label, "", format_number("%.4g", p.flops / p.seconds / 1e12) + " TFLOP/s");
    points.push_back(p);
  }
  if (model) {
    for (const LinearShape& shape : model_linear_shapes(*model)) {
      GemmPoint p;
      p.label = std::string(precision) + " " + shape.label + " " + gemm_label(model_tokens, shape.k, shape.n);
      p.flops = 3.0 * 2.0 * static_cast<double>(model_tokens) * static_cast<double>(shape.k) * static_cast<double>(shape.n);
      p.seconds = seconds_of(model_tokens, shape.k, shape.n, true);
      p.model_shape = true;
      row(p.label, "fwd+dgrad+wgrad", format_number("%.4g", p.flops / p.seconds / 1e12) + " TFLOP/s");
      points.push_back(p);
    }
  }
  return points;
}

void measure_host(const Sweep& sweep, const CalibrationOptions& o, LocalFigures& f) {
  f.host = host_facts();
  row("host", "", f.host.cpu_model + ", " + std::to_string(f.host.logical_cores) + " logical cores, " +
                      format_number("%.1f", to_gib(f.host.memory_bytes)) + " GiB");
  // First, while nothing else runs: the probe times the host's launches of an idle GPU.
  if (o.backend == "cuda") {
    f.host_probe = run_host_probe();
    if (const HostProbe* probe = std::get_if<HostProbe>(&f.host_probe))
      row("DeepSpeed host speed (host_probe.py)", "eager op",
          format_number("%.2f", probe->eager_op_seconds * 1e6) + " us");
    else
      row("DeepSpeed host speed (host_probe.py)", "", "not measured: " + std::get<std::string>(f.host_probe));
  }
  f.host_copy_bandwidth = host_copy_bandwidth(sweep.copy_bytes, f.host.logical_cores, sweep.repeats);
  row("host memory copy (read + write)", size_label(sweep.copy_bytes),
      format_number("%.2f", f.host_copy_bandwidth / 1e9) + " GB/s (" + std::to_string(f.host.logical_cores) +
          " threads)");
  // The node's rate: one rank's optimizer with every core (default_optimizer_threads of one local rank); and one
  // thread's, which the planner scales by a rank's thread count (sim/simulator.cpp cpu_optimizer_rate).
  f.adamw_node_threads = exec::offload::default_optimizer_threads(1);
  f.adamw_node = cpu_adamw_params_per_second(sweep.adamw_parameters, f.adamw_node_threads, sweep.repeats);
  row("CPU AdamW (" + std::to_string(f.adamw_node_threads) + " threads)",
      std::to_string(sweep.adamw_parameters) + " params", format_number("%.3f", f.adamw_node / 1e9) + " Gparam/s");
  f.adamw_thread = f.adamw_node_threads == 1 ? f.adamw_node
                                             : cpu_adamw_params_per_second(sweep.adamw_parameters, 1, sweep.repeats);
  row("CPU AdamW (1 thread)", std::to_string(sweep.adamw_parameters) + " params",
      format_number("%.3f", f.adamw_thread / 1e9) + " Gparam/s");
  f.adamw_call_seconds = cpu_adamw_call_seconds(f.adamw_node_threads, sweep.repeats);
  row("CPU AdamW call (" + std::to_string(f.adamw_node_threads) + " threads)", "1024 params",
      format_number("%.1f", f.adamw_call_seconds * 1e6) + " us");
  if (o.nvme_path) {
    f.disk = disk_rates(*o.nvme_path, sweep.disk_bytes, sweep.repeats);
    row("disk write (O_DIRECT, io_uring)", size_label(sweep.disk_bytes),
        format_number("%.2f", f.disk->write_bytes_per_second / 1e9) + " GB/s");
    row("disk read (O_DIRECT, io_uring)", size_label(sweep.disk_bytes),
        format_number("%.2f", f.disk->read_bytes_per_second / 1e9) + " GB/s");
  } else {
    row("disk", "", "not measured (no --nvme-path)");
  }
}

void measure_cpu_device(const Sweep& sweep, const std::optional<ModelDescription>& model, int world, LocalFigures& f) {
  f.gpu_model = "CPU backend rank on " + f.host.cpu_model;
  f.gpu_memory_bytes = f.host.memory_bytes / world;
  f.gpu_memory_source = "the CPU backend keeps a rank's tensors in host memory: " + std::to_string(f.host.memory_bytes) +
                        " bytes of available host memory (MemAvailable) shared by " + std::to_string(world) + " rank(s)";
  f.gemm = sweep_gemms(sweep, model, sweep.cpu_model_tokens, "fp32",
                       [&](std::int64_t m, std::int64_t k, std::int64_t n, bool training) {
                         return cpu_gemm_seconds(m, k, n, training, sweep.repeats);
                       });
  // A CPU has no datasheet tensor-core peak: the best rate measured here stands for the peak of every precision
  // (the CPU backend computes in fp32 whatever the precision asked), so the curve's efficiencies are <= 1 and
  // peak x efficiency is the measured rate at each size.
  double best = 0.0;
  for (const GemmPoint& p : f.gemm) best = std::max(best, p.flops / p.seconds);
  f.peak_bf16 = f.peak_fp16 = f.peak_fp32 = best;
  f.peak_source = "no datasheet peak for a CPU: the best fp32 GEMM rate measured here (exec::cpu::matmul_forward, "
                  "Eigen), " + format_number("%.1f", best / 1e9) +
                      " GFLOP/s, for every precision (the CPU backend runs fp32)";
  f.gemm_source = "the CPU backend's fp32 GEMMs (exec::cpu::matmul_forward / matmul_backward, Eigen)";
  f.hbm_bandwidth = f.streaming_bandwidth = f.host_copy_bandwidth;
  f.hbm_source = f.streaming_source = "host memory copy (memcpy by " + std::to_string(f.host.logical_cores) +
                                      " threads, bytes read + written), the CPU backend's device memory";
  // The CPU backend's offload "copies" are host memory copies: bytes copied per second is half of read + write.
  f.pcie_bandwidth = 0.5 * f.host_copy_bandwidth;
  f.pcie_source = "the CPU backend has no PCIe: its host<->device copies are host memory copies, bytes copied per "
                  "second (half the read + write copy bandwidth)";
}

#ifdef ZEROPLAN_HAVE_CUDA
// Datasheet figures of the GPUs we run on, which no program can measure (a dense peak is the rate the tensor
// cores could reach, not what any kernel reaches). A GPU matches by its CUDA name and multiprocessor count.
struct Datasheet {
  const char* name_contains;
  int multiprocessors;
  double bf16, fp16, fp32, hbm;
  const char* source;
};
constexpr Datasheet kDatasheets[] = {
    {"H200", 132, 989e12, 989e12, 67e12, 4.8e12,
     "NVIDIA H200 Tensor Core GPU datasheet (SXM): dense bf16/fp16 Tensor Core 989 TFLOP/s (1979 with sparsity), "
     "fp32 67 TFLOP/s, HBM3e 4.8 TB/s"},
    {"H100 80GB HBM3", 132, 989e12, 989e12, 67e12, 3.35e12,
     "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): dense bf16/fp16 Tensor Core 989 TFLOP/s (1979 with "
     "sparsity), fp32 67 TFLOP/s, HBM3 3.35 TB/s"},
    {"H100 PCIe", 114, 756e12, 756e12, 51e12, 2.0e12,
     "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe): dense bf16/fp16 Tensor Core 756 TFLOP/s (1513 with "
     "sparsity), fp32 51 TFLOP/s, HBM2e 2.0 TB/s"},
};

const Datasheet* datasheet_for(const std::string& name, int multiprocessors) {
  for (const Datasheet& d : kDatasheets)
    if (name.find(d.name_contains) != std::string::npos && d.multiprocessors == multiprocessors) return &d;
  return nullptr;
}

void measure_gpu(const Sweep& sweep, const std::optional<ModelDescription>& model,
                 const std::optional<ClusterDescription>& base, LocalFigures& f) {
  exec::cuda::DeviceCalibrator device(0);
  const exec::cuda::DeviceFacts& facts = device.facts();
  f.gpu_model = facts.name;
  f.gpu_memory_bytes = facts.total_bytes;
  f.gpu_memory_source = "cudaMemGetInfo total on GPU 0";
  f.cuda_context_bytes = facts.context_bytes;
  row("GPU 0", "", facts.name + ", " + std::to_string(facts.multiprocessors) + " SMs, " +
                       format_number("%.2f", to_gib(facts.total_bytes)) + " GiB, context " +
                       format_number("%.0f", static_cast<double>(facts.context_bytes) / kMiB) + " MiB");
  if (const Datasheet* d = datasheet_for(facts.name, facts.multiprocessors)) {
    f.peak_bf16 = d->bf16;
    f.peak_fp16 = d->fp16;
    f.peak_fp32 = d->fp32;
    f.hbm_bandwidth = d->hbm;
    f.peak_source = f.hbm_source = d->source;
  } else if (base) {
    f.peak_bf16 = base->peak_flops_bf16;
    f.peak_fp16 = base->peak_flops_fp16;
    f.peak_fp32 = base->peak_flops_fp32;
    f.hbm_bandwidth = base->hbm_bandwidth;
    f.peak_source = f.hbm_source = "from --base " + base->name + " (" + base->gpu_model + "): " + facts.name +
                                   " is not in calibrate's datasheet table";
  } else {
    throw InputError(kCli, "--base",
                     "no datasheet peak is known for GPU \"" + facts.name + "\" (" + std::to_string(facts.multiprocessors) +
                         " SMs); give --base CLUSTER whose peak_flops_bf16/fp16/fp32 and hbm_bandwidth describe it");
  }
  f.gemm = sweep_gemms(sweep, model, sweep.gpu_model_tokens, "bf16",
                       [&](std::int64_t m, std::int64_t k, std::int64_t n, bool training) {
                         return device.gemm_seconds({m, k, n}, training, sweep.gemm_repeats);
                       });
  f.gemm_source = "bf16 GEMMs through the executor's cuBLASLt matmul (exec/cuda/matmul.cuh, 32 MiB workspace, "
                  "fastest of its heuristic candidates), random operands, CUDA events, median of " +
                  std::to_string(sweep.gemm_repeats);
  if (model && model->transformer) {
    // The executor's causal attention over the model's tokens in sequences of up to 1024, counted as the planner
    // counts it (sim/compute_time.cpp transformer_block): forward 2 s h FLOPs per token (half of Q K^T and P V),
    // backward 2.5 times that. Timed through the kernels the CUDA trainer runs at this shape: cuDNN's fused
    // attention where it is offered and cuDNN plans it, else the executor's own (device_calibration.h).
    const TransformerShape& s = *model->transformer;
    const std::int64_t seq = std::min<std::int64_t>(1024, sweep.gpu_model_tokens);
    const exec::cuda::AttentionShape shape{static_cast<int>(sweep.gpu_model_tokens / seq), static_cast<int>(seq),
                                           static_cast<int>(s.hidden), static_cast<int>(s.heads),
                                           static_cast<int>(s.kv_heads)};
    const exec::cuda::AttentionSeconds t = device.attention_seconds(shape, sweep.gemm_repeats);
    const double causal_work = 2.0 * static_cast<double>(shape.batch) * static_cast<double>(seq) *
                               static_cast<double>(seq) * static_cast<double>(s.hidden);
    f.executor_attention_forward = causal_work / t.forward;
    f.executor_attention_backward = 2.5 * causal_work / t.backward;
    const std::string label = "bf16 attention " + std::to_string(shape.batch) + "x" + std::to_string(seq) + ", " +
                              std::to_string(s.heads) + " heads of " + std::to_string(s.hidden / s.heads) +
                              (s.kv_heads > 0 && s.kv_heads != s.heads ? " (" + std::to_string(s.kv_heads) + " key/value)"
                                                                       : std::string());
    row(label, "kernels", t.kernel);
    if (!t.cudnn) row(label, "not cuDNN's", t.cudnn_note);
    row(label, "forward", format_number("%.4g", f.executor_attention_forward / 1e12) + " TFLOP/s");
    row(label, "backward", format_number("%.4g", f.executor_attention_backward / 1e12) + " TFLOP/s");
    // The executor's own kernels too, which it runs where cuDNN's is not offered (fp32, --deterministic, other
    // sequence lengths): the planner times such runs at these rates (sim/compute_time.cpp).
    const exec::cuda::AttentionSeconds own =
        t.cudnn ? device.attention_seconds(shape, sweep.gemm_repeats, exec::cuda::AttentionKernels::executor) : t;
    f.executor_kernel_attention_forward = causal_work / own.forward;
    f.executor_kernel_attention_backward = 2.5 * causal_work / own.backward;
    if (t.cudnn) {
      row(label, "own kernels forward", format_number("%.4g", f.executor_kernel_attention_forward / 1e12) + " TFLOP/s");
      row(label, "own kernels backward", format_number("%.4g", f.executor_kernel_attention_backward / 1e12) + " TFLOP/s");
    }
    f.executor_kernel_attention_source =
        own.kernel + " at " + label + " (" + model->name + "), what the CUDA trainer runs where cuDNN's fused attention is "
        "not offered (fp32, --deterministic, sequences not a multiple of 128), random q, k, v and output gradient, CUDA "
        "events, median of " + std::to_string(sweep.gemm_repeats);
    f.executor_attention_source =
        t.kernel + " at " + label + " (" + model->name + "), the attention the CUDA trainer runs at this shape" +
        (t.cudnn ? std::string(" (16-bit, not --deterministic: a --deterministic run uses the executor's kernels, "
                               "exec/cuda/attention.cu)")
                 : " (" + t.cudnn_note + ")") +
        ", random q, k, v and output gradient, CUDA events, median of " + std::to_string(sweep.gemm_repeats) +
        "; FLOP/s on the causal work (forward 2 s^2 h per sequence, backward 2.5 times that)";
  }
  f.streaming_bandwidth = device.device_copy_bandwidth(sweep.copy_bytes, sweep.repeats);
  f.streaming_source = "device-to-device cudaMemcpyAsync of " + size_label(sweep.copy_bytes) +
                       ", bytes read + written, median of " + std::to_string(sweep.repeats);
  row("device copy (read + write)", size_label(sweep.copy_bytes),
      format_number("%.1f", f.streaming_bandwidth / 1e9) + " GB/s");
  const exec::cuda::PinnedCopyRates pcie = device.pinned_copy_bandwidth(sweep.copy_bytes, sweep.repeats);
  row("pinned host to device", size_label(sweep.copy_bytes),
      format_number("%.2f", pcie.host_to_device / 1e9) + " GB/s");
  row("pinned device to host", size_label(sweep.copy_bytes),
      format_number("%.2f", pcie.device_to_host / 1e9) + " GB/s");
  // One field serves both directions (the planner times uploads and downloads with it): the slower one, so that
  // neither is promised faster than measured.
  f.pcie_bandwidth = std::min(pcie.host_to_device, pcie.device_to_host);
  f.pcie_source = "pinned cudaMemcpyAsync of " + size_label(sweep.copy_bytes) + " on GPU 0: host to device " +
                  format_number("%.2f", pcie.host_to_device / 1e9) + " GB/s, device to host " +
                  format_number("%.2f", pcie.device_to_host / 1e9) + " GB/s; the slower is written";
}
#endif

// The interconnect from the ranks' points: the all-reduce busbw at the largest size as the asymptote, and the
// per-call latency as the cluster files derive it: alpha = t(smallest S) - S factor / busbw(largest S), the least
// over the three collectives (at least 0).
nlohmann::json interconnect(const nlohmann::json& results, int world) {
  std::map<std::string, std::vector<CollectivePoint>> by_kind;
  nlohmann::json measured = nlohmann::json::array();
  for (const auto& p : results.at("points")) {
    CollectivePoint point;
    const std::string kind = p.at("collective").get<std::string>();
    point.kind = kind == "all_reduce" ? CollectiveKind::all_reduce
                 : kind == "reduce_scatter" ? CollectiveKind::reduce_scatter : CollectiveKind::all_gather;
    point.ranks = p.at("ranks").get<int>();
    point.message_bytes = p.at("message_bytes").get<Bytes>();
    point.bus_bandwidth = p.at("bus_bandwidth").get<double>();
    point.seconds = p.at("seconds").get<double>();
    by_kind[kind].push_back(point);
    measured.push_back({{"collective", kind}, {"ranks", point.ranks}, {"message_bytes", point.message_bytes},
                        {"bus_bandwidth", point.bus_bandwidth}});
  }
  if (by_kind.size() != 3) throw std::runtime_error("calibrate: the ranks returned points of " +
                                                    std::to_string(by_kind.size()) + " collectives, expected 3");
  double latency = std::numeric_limits<double>::infinity();
  for (auto& [kind, points] : by_kind) {
    std::sort(points.begin(), points.end(),
              [](const CollectivePoint& a, const CollectivePoint& b) { return a.message_bytes < b.message_bytes; });
    const CollectivePoint& small = points.front();
    const CollectivePoint& large = points.back();
    const double alpha = small.seconds - static_cast<double>(small.message_bytes) *
                                             collective_factor(small.kind, world) / large.bus_bandwidth;
    latency = std::min(latency, std::max(0.0, alpha));
  }
  nlohmann::json link = {{"name", results.at("link").get<std::string>()},
                         {"bus_bandwidth", by_kind.at("all_reduce").back().bus_bandwidth},
                         {"latency_seconds", latency},
                         {"measured", std::move(measured)}};
  // The larger of the two kinds' further-call costs: neither grouped reduction nor grouped gather is promised
  // faster than measured.
  if (results.contains("grouped")) {
    double grouped = 0.0;
    for (const auto& g : results.at("grouped")) grouped = std::max(grouped, g.at("seconds_per_further_call").get<double>());
    link["grouped_call_seconds"] = grouped;
  }
  return link;
}

// Writes `text` to `path`: a new file unless `force` (O_EXCL, so a file made meanwhile is not overwritten);
// with `force`, through a temporary file renamed over it, so the old description stays whole until the new one is.
void write_description(const std::string& path, const std::string& text, bool force) {
  const std::string target = force ? path + ".tmp." + std::to_string(::getpid()) : path;
  const int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST && !force) throw InputError(path, "--out", "exists; give --force to replace it");
    throw InputError(target, "--out", std::string("cannot create: ") + std::strerror(errno));
  }
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(target.c_str());
      throw std::runtime_error("calibrate: writing " + target + " failed: " + std::strerror(error));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    ::unlink(target.c_str());
    throw std::runtime_error("calibrate: closing " + target + " failed: " + std::strerror(errno));
  }
  if (force && ::rename(target.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(target.c_str());
    throw std::runtime_error("calibrate: renaming " + target + " to " + path + " failed: " + std::strerror(error));
  }
}

void check_options(const CalibrationOptions& o) {
  if (o.backend != "cuda" && o.backend != "cpu")
    throw InputError(kCli, "--backend", "expected cuda or cpu, got \"" + o.backend + "\"");
  if (o.gpus && *o.gpus < 1) throw InputError(kCli, "--gpus", "expected at least 1, got " + std::to_string(*o.gpus));
  if (o.name && o.name->empty()) throw InputError(kCli, "--name", "expected a non-empty name");
  if (!(o.collective_timeout_s >= exec::kMinCollectiveTimeoutS && o.collective_timeout_s <= exec::kMaxCollectiveTimeoutS))
    throw InputError(kCli, "--collective-timeout",
                     "expected seconds in [" + format_number("%g", exec::kMinCollectiveTimeoutS) + ", " +
                         format_number("%g", exec::kMaxCollectiveTimeoutS) + "], got " +
                             format_number("%g", o.collective_timeout_s));
  if (o.out.empty()) throw InputError(kCli, "--out", "expected a file name");
  const std::filesystem::path out(o.out);
  std::error_code error;
  if (std::filesystem::is_directory(out, error)) throw InputError(o.out, "--out", "is a directory; expected a file name");
  if (std::filesystem::exists(out, error) && !o.force) throw InputError(o.out, "--out", "exists; give --force to replace it");
  const std::filesystem::path parent = out.has_parent_path() ? out.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(parent, error))
    throw InputError(o.out, "--out", "its directory " + parent.string() + " does not exist");
  if (o.nvme_path && !std::filesystem::is_directory(*o.nvme_path, error))
    throw InputError(*o.nvme_path, "--nvme-path", "is not an existing directory");
}

int calibrate_here(const CalibrationOptions& o) {
  check_options(o);
  std::optional<ClusterDescription> base;
  if (o.base) {
    try {
      base = load_cluster(*o.base);
    } catch (const InputError& e) {
      // load_cluster speaks of --cluster, the flag of the other commands; here the cluster came from --base.
      if (e.source() == "--cluster") throw InputError(kCli, "--base", e.problem());
      throw InputError(*o.base, "--base", e.what());
    }
  }
  std::optional<ModelDescription> model;
  if (o.model) {
    model = load_model(*o.model);
    model_linear_shapes(*model);  // a layer list is refused before anything is measured
  }
  const bool cpu = o.backend == "cpu";
  int world = o.gpus.value_or(1);
  if (cpu) {
    if (world > 1 && !exec::mpi_available())
      throw InputError(kCli, "--gpus", "this zeroplan was built without MPI: the CPU backend calibrates one rank");
  } else {
#ifdef ZEROPLAN_HAVE_CUDA
    std::string why;
    if (!exec::cuda_device_available(&why)) throw InputError(kCli, "--backend", "cuda: " + why + " (try --backend cpu)");
    const int devices = exec::cuda_device_count();
    if (!o.gpus) world = devices;
    if (world > devices)
      throw InputError(kCli, "--gpus", std::to_string(world) + " GPUs asked for; this machine has " + std::to_string(devices));
#else
    throw InputError(kCli, "--backend", "this zeroplan was built without the CUDA executor (try --backend cpu)");
#endif
  }
  const Sweep sweep = make_sweep(o.quick, cpu);
  std::printf("zeroplan calibrate: %s backend, %d rank(s)%s\n", o.backend.c_str(), world, o.quick ? ", quick sweep" : "");
  row("measurement", "size", "result");
  LocalFigures figures;
  measure_host(sweep, o, figures);
  if (cpu) {
    measure_cpu_device(sweep, model, world, figures);
  } else {
#ifdef ZEROPLAN_HAVE_CUDA
    measure_gpu(sweep, model, base, figures);
#endif
  }

  std::optional<nlohmann::json> ranks;
  if (world > 1) {
    // The ranks run this same command line, started as `zeroplan run --gpus N` starts its ranks; rank 0 writes
    // its points to a file of our own, read back here.
    const std::filesystem::path results =
        std::filesystem::temp_directory_path() / ("zeroplan_calibrate_" + std::to_string(::getpid()) + ".json");
    std::vector<std::string> argv = this_process_command_line();
    argv.push_back("--rank-results");
    argv.push_back(results.string());
    int status = 0;
    if (cpu) {
      status = launch_under_mpirun(argv, world, o.collective_timeout_s);
    } else {
#ifdef ZEROPLAN_HAVE_CUDA
      status = launch_local_ranks(argv, world, exec::make_nccl_unique_id_hex(), o.collective_timeout_s);
#endif
    }
    std::error_code ignored;
    if (status != 0) {
      std::filesystem::remove(results, ignored);
      std::cerr << "zeroplan calibrate: the ranks measuring the collectives failed; nothing was written\n";
      return status;
    }
    ranks = read_json_file(results, /*allow_comments=*/false);
    std::filesystem::remove(results, ignored);
  } else {
    row("collectives", "", "not measured: one " + std::string(cpu ? "rank" : "GPU"));
  }

  std::optional<nlohmann::json> intra_node;
  if (ranks) intra_node = interconnect(*ranks, world);
  // Through the loader: it validates every field and fills (and says in the provenance) what nothing gave.
  const ClusterDescription cluster =
      cluster_from_json(describe_calibration(o, figures, base, ranks, intra_node, world), o.out);
  write_description(o.out, cluster_to_json(cluster).dump(2) + "\n", o.force);
  load_cluster(o.out);  // what plan --cluster will read
  std::printf("wrote %s (%s)\n", o.out.c_str(), cluster.name.c_str());
  return 0;
}

}  // namespace

int run_calibration(const CalibrationOptions& o) {
  const RankEnvironment env = rank_environment();
  if (!env.launched) {
    if (o.rank_results)
      throw InputError(kCli, "--rank-results", "is calibrate's own, for the ranks it starts; leave it out");
    return calibrate_here(o);
  }
  if (!o.rank_results)
    throw InputError(kCli, "--gpus", "calibrate starts its own ranks: run it without mpirun, with --gpus N");
  std::optional<RankGuard> guard;
  int status = 0;
  try {
    status = calibration_rank(o, env, guard);
  } catch (const std::exception& e) {
    if (!guard) throw;
    return guard->fail(e.what());
  }
  guard->done(status);
  return status;
}

}  // namespace zeroplan
