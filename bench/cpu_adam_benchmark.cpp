// cpu_adam_benchmark: parameters per second of ZeRO-Offload's CPU AdamW (exec/offload/cpu_adamw.h) and the
// fraction of the host's memory bandwidth it reaches, both measured in the same run with the same threads.
//
//   build-offload/bench/cpu_adam_benchmark [--sizes 1e6,1e7,1e8] [--threads N] [--repeats 7] [--isa auto]
//                                          [--copy bf16|fp16|none] [--grads fp32|bf16|fp16] [--no-scalar-baseline]
//
// One JSON line per size. Bytes moved per parameter as the issue counts them: read p, g, m, v and write p, m, v
// (fp32 gradients: 28 bytes) plus the 16-bit copy (2 bytes): 30. The host's bandwidth is measured with two
// stream kernels over fp32 arrays with the same threads and the same footprint as the AdamW arrays, bytes
// counted as STREAM counts them (every element read or written once; the read a store to an uncached line
// causes first, the write-allocate, is not counted):
//   triad     a[i] = b[i] + s * c[i]   12 bytes per element (STREAM's triad; its write-allocate read of a is
//                                       4 more bytes that move but are not counted)
//   in-place  a[i] = a[i] + s * b[i]   12 bytes per element (a is read before it is written: nothing uncounted,
//                                       and the pattern of AdamW's p, m and v)
// stream_bytes_per_s is the higher of the two and bandwidth_fraction = AdamW bytes/s over it. Each figure is the
// median of --repeats timings, the kernels' repeats and then AdamW's (each pool's workers asleep before the other
// pool runs: they spin after each task, exec/offload/thread_pool.h), after one untimed warm-up of each.
#include <chrono>
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/host_bench_common.h"
#include "core/input_error.h"
#include "exec/offload/cpu_adamw.h"
#include "exec/offload/thread_pool.h"

namespace zeroplan::bench {
namespace {

using exec::offload::AdamwHyper;
using exec::offload::AdamwTensors;
using exec::offload::CpuAdamw;
using exec::offload::CpuIsa;
using exec::offload::HalfFormat;
using exec::offload::ThreadPool;

constexpr std::int64_t kMaxParams = std::int64_t{1} << 36;  // 64 Gi parameters: 1.9 TiB of arrays
constexpr double kStreamBytesPerElement = 12;               // both kernels: two fp32 reads and one write

struct Options {
  std::vector<std::string> sizes = {"1e6", "1e7", "1e8"};
  int threads = 0;  // 0: exec::offload::default_optimizer_threads(1), all of this node's cores
  int repeats = 7;
  std::string isa = "auto";
  std::string copy = "bf16";
  std::string grads = "fp32";
  bool scalar_baseline = true;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The contiguous share of thread t among `threads` over n elements, bounds at multiples of 64 elements (as the
// AdamW splits its work).
std::pair<std::int64_t, std::int64_t> share_of(int t, int threads, std::int64_t n) {
  const std::int64_t share = ((n + 63) / 64 + threads - 1) / threads * 64;
  const std::int64_t begin = std::min(n, share * t);
  return {begin, std::min(n, begin + share)};
}

// The two stream kernels over [begin, end), built for AVX-512F, AVX2 and the baseline and picked by the CPU at
// load time (GCC/clang target_clones), so that the bandwidth they measure is not held back by narrow vectors.
__attribute__((target_clones("avx512f", "avx2", "default"))) void stream_triad(
    float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ c, float s, std::int64_t begin,
    std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
}
__attribute__((target_clones("avx512f", "avx2", "default"))) void stream_in_place(
    float* __restrict__ a, const float* __restrict__ b, float s, std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) a[i] = a[i] + s * b[i];
}

CpuIsa parse_isa(const std::string& text) {
  if (text == "auto") return exec::offload::detect_cpu_isa();
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512}) {
    if (text != exec::offload::cpu_isa_name(isa)) continue;
    if (!exec::offload::cpu_supports(isa))
      throw InputError("command line", "--isa",
                       "this CPU cannot run " + text + " (it runs up to " +
                           exec::offload::cpu_isa_name(exec::offload::detect_cpu_isa()) + ")");
    return isa;
  }
  throw InputError("command line", "--isa", "'" + text + "'; expected auto, scalar, avx2 or avx512");
}

// The AdamW arrays of one size, filled by the threads that will stream them (first touch).
struct AdamwArrays {
  HostArray<float> params, grads, exp_avg, exp_avg_sq;
  HostArray<std::uint16_t> grads_half, params_half;  // grads_half: bf16 or fp16 bits (half_grads)
  std::string half_grads;
  std::int64_t count;

  // grads: "fp32", or "bf16" / "fp16" (16-bit gradients as the executor copies them to the host: bf16 training's,
  // and fp16 training's loss-scaled ones, ResNet-101 in the DeepSpeed tutorial's fp16).
  AdamwArrays(std::int64_t n, const std::string& grads_type, bool copy, ThreadPool& pool)
      : params(allocate_host_array<float>(n)),
        grads(grads_type == "fp32" ? allocate_host_array<float>(n) : nullptr),
        exp_avg(allocate_host_array<float>(n)),
        exp_avg_sq(allocate_host_array<float>(n)),
        grads_half(grads_type == "fp32" ? nullptr : allocate_host_array<std::uint16_t>(n)),
        params_half(copy ? allocate_host_array<std::uint16_t>(n) : nullptr),
        half_grads(grads_type == "fp32" ? "" : grads_type),
        count(n) {
    const std::uint16_t half_bits = grads_type == "fp16" ? 0x1419 : 0x3A83;  // 0.001 in fp16 / bf16
    pool.run([&](int t) {
      const auto [begin, end] = share_of(t, pool.threads(), n);
      for (std::int64_t i = begin; i < end; ++i) {
        // Parameters in [-1, 1) and gradients around 1e-3 (patterns, not random: no cost, no denormals).
        const auto u = static_cast<std::uint64_t>(i);
        params[i] = static_cast<float>(static_cast<int>((u * 2654435761u) % 2001) - 1000) * 1e-3f;
        const float g = static_cast<float>(static_cast<int>((u * 40503u) % 201) - 100) * 1e-5f + 1e-6f;
        if (grads) grads[i] = g;
        if (grads_half) grads_half[i] = half_bits;
        exp_avg[i] = 0;
        exp_avg_sq[i] = 0;
        if (params_half) params_half[i] = 0;
      }
    });
  }

  AdamwTensors tensors(HalfFormat format) const {
    AdamwTensors t;
    t.params = params.get();
    t.grads = grads.get();
    if (half_grads == "bf16") t.grads_bf16 = grads_half.get();
    if (half_grads == "fp16") t.grads_fp16 = grads_half.get();
    t.exp_avg = exp_avg.get();
    t.exp_avg_sq = exp_avg_sq.get();
    t.params_half = params_half.get();
    t.half_format = format;
    t.count = count;
    return t;
  }
};

// Seconds of one update; the step number advances so that the moments keep changing.
double time_adamw(CpuAdamw& adamw, const AdamwTensors& t, std::int64_t step) {
  AdamwHyper hyper;
  hyper.lr = 1e-4f;
  hyper.weight_decay = 0.01f;
  hyper.grad_scale = 1.0f / 1024.0f;
  hyper.step = step;
  const auto start = std::chrono::steady_clock::now();
  adamw.update(t, hyper);
  return seconds_since(start);
}

int run(const Options& o) {
  const CpuIsa isa = parse_isa(o.isa);
  if (o.copy != "bf16" && o.copy != "fp16" && o.copy != "none")
    throw InputError("command line", "--copy", "'" + o.copy + "'; expected bf16, fp16 or none");
  if (o.grads != "fp32" && o.grads != "bf16" && o.grads != "fp16")
    throw InputError("command line", "--grads", "'" + o.grads + "'; expected fp32, bf16 or fp16");
  if (o.threads < 0) throw InputError("command line", "--threads", "expected at least 1 (0: all cores)");
  if (o.repeats < 1) throw InputError("command line", "--repeats", "expected at least 1");
  std::vector<std::int64_t> sizes;
  for (const std::string& text : o.sizes) sizes.push_back(parse_count(text, "--sizes", kMaxParams));
  const int threads = o.threads > 0 ? o.threads : exec::offload::default_optimizer_threads(1);
  const bool copy = o.copy != "none";
  const HalfFormat format = o.copy == "fp16" ? HalfFormat::fp16 : HalfFormat::bf16;
  const double bytes_per_param = 24 + (o.grads == "fp32" ? 4 : 2) + (copy ? 2 : 0);

  CpuAdamw adamw(threads, isa);
  ThreadPool pool(threads);  // the stream kernels' threads, as many as the AdamW's
  for (const std::int64_t n : sizes) {
    const double load_before = load_average_1min();
    AdamwArrays arrays(n, o.grads, copy, pool);
    const AdamwTensors t = arrays.tensors(format);
    // Stream arrays with the AdamW arrays' footprint, so that both run from the same level of the hierarchy.
    const std::int64_t stream_n =
        static_cast<std::int64_t>(bytes_per_param * static_cast<double>(n) / kStreamBytesPerElement);
    HostArray<float> a = allocate_host_array<float>(stream_n), b = allocate_host_array<float>(stream_n),
                     c = allocate_host_array<float>(stream_n);
    pool.run([&](int th) {
      const auto [begin, end] = share_of(th, threads, stream_n);
      for (std::int64_t i = begin; i < end; ++i) {
        a[i] = 0;
        b[i] = 1;
        c[i] = 2;
      }
    });
    // Seconds of one pass of a stream kernel; `in_place` picks a[i] += s * b[i], else the triad.
    auto time_stream = [&](bool in_place) {
      const auto start = std::chrono::steady_clock::now();
      pool.run([&](int th) {
        const auto [begin, end] = share_of(th, threads, stream_n);
        if (in_place) {
          stream_in_place(a.get(), b.get(), 1e-3f, begin, end);
        } else {
          stream_triad(a.get(), b.get(), c.get(), 1e-3f, begin, end);
        }
      });
      return seconds_since(start);
    };

    std::int64_t step = 1;
    time_stream(false);
    time_stream(true);
    std::this_thread::sleep_for(std::chrono::duration<double>(20 * ThreadPool::kSpinSeconds));
    time_adamw(adamw, t, step++);
    // The stream kernels' repeats, then the AdamW's, each after the other pool's workers have gone to sleep: a pool's
    // workers spin for ThreadPool::kSpinSeconds after each task, and beside the other pool's threads they take its
    // cores (interleaved, a 1,000-parameter update read 119-315 us instead of the engine's one pool's cost).
    const auto let_workers_sleep = [] {
      std::this_thread::sleep_for(std::chrono::duration<double>(20 * ThreadPool::kSpinSeconds));
    };
    std::vector<double> triad_s, in_place_s, adamw_s;
    for (int r = 0; r < o.repeats; ++r) {
      triad_s.push_back(time_stream(false));
      in_place_s.push_back(time_stream(true));
    }
    let_workers_sleep();
    for (int r = 0; r < o.repeats; ++r) adamw_s.push_back(time_adamw(adamw, t, step++));
    let_workers_sleep();
    const double adamw_time = median(adamw_s);
    const double params_per_s = static_cast<double>(n) / adamw_time;
    const double adamw_bytes_per_s = bytes_per_param * params_per_s;
    const double stream_bytes = kStreamBytesPerElement * static_cast<double>(stream_n);
    const double triad_bytes_per_s = stream_bytes / median(triad_s);
    const double in_place_bytes_per_s = stream_bytes / median(in_place_s);
    const double stream_bytes_per_s = std::max(triad_bytes_per_s, in_place_bytes_per_s);

    nlohmann::ordered_json line;
    line["params"] = n;
    line["threads"] = threads;
    line["gparam_per_s"] = params_per_s / 1e9;
    line["bandwidth_fraction"] = adamw_bytes_per_s / stream_bytes_per_s;
    line["isa"] = exec::offload::cpu_isa_name(isa);
    line["grads"] = o.grads;
    line["copy"] = o.copy;
    line["bytes_per_param"] = bytes_per_param;
    line["adamw_bytes_per_s"] = adamw_bytes_per_s;
    line["adamw_seconds_median"] = adamw_time;
    line["stream_bytes_per_s"] = stream_bytes_per_s;
    line["stream_kernel"] = in_place_bytes_per_s > triad_bytes_per_s ? "in-place" : "triad";
    line["stream_triad_bytes_per_s"] = triad_bytes_per_s;
    line["stream_in_place_bytes_per_s"] = in_place_bytes_per_s;
    line["stream_footprint_bytes"] = 3 * 4 * stream_n;
    if (o.scalar_baseline) {
      CpuAdamw scalar_adamw(1, CpuIsa::scalar);
      std::vector<double> scalar_s;
      for (int r = 0; r < std::min(o.repeats, 3); ++r) scalar_s.push_back(time_adamw(scalar_adamw, t, step++));
      line["scalar_1thread_gparam_per_s"] = static_cast<double>(n) / median(scalar_s) / 1e9;
    }
    line["repeats"] = o.repeats;
    line["loadavg_1min_before"] = load_before;
    line["loadavg_1min_after"] = load_average_1min();
    std::cout << line.dump() << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace zeroplan::bench

int main(int argc, char** argv) {
  zeroplan::bench::Options o;
  CLI::App app{"CPU AdamW (ZeRO-Offload) parameters/s and the fraction of the host's memory bandwidth it reaches"};
  app.add_option("--sizes", o.sizes, "parameter counts, e.g. 1e6,1e7,1e8")->delimiter(',');
  app.add_option("--threads", o.threads, "threads for AdamW and the triad (default 0: all of this node's cores)");
  app.add_option("--repeats", o.repeats, "timed repetitions per size; the median is printed");
  app.add_option("--isa", o.isa, "auto, scalar, avx2 or avx512 (auto: the best this CPU runs)");
  app.add_option("--copy", o.copy, "16-bit copy of the parameters: bf16, fp16 or none");
  app.add_option("--grads", o.grads, "gradient type: fp32, bf16 or fp16");
  app.add_flag("!--no-scalar-baseline", o.scalar_baseline, "skip the single-thread scalar AdamW timing");
  return zeroplan::bench::run_benchmark(app, argc, argv, "cpu_adam_benchmark", [&] { return zeroplan::bench::run(o); });
}
