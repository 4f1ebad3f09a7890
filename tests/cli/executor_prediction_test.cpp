// What `zeroplan run` predicts for its own executor against what the executor allocated, on the CPU backend (MPI
// ranks, fp32 so that the CPU backend's fp32 tensors are the GPU plan's bytes): at stages 0-3, with and without
// the optimizer offloaded to the CPU, on 1 and 2 ranks, every component the ZeRO engine allocates through its
// device (params, grads, master_params, optimizer_states, gradient_buckets, gathered_params: the tags the CUDA
// allocator uses too) and the offloaded host states equal the plan's, on every rank; and `zeroplan plan --engine
// zeroplan` with the same inputs gives the run's predicted figures. (Activations and logits are the CPU
// reference trainer's own fp32 buffers, not the CUDA trainer's, and the CPU backend has no device context: the
// stored GPU runs hold those, tests/sim/executor_measurements_test.cpp.)
#include <cstdint>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_support.h"

using namespace zeroplan_test;
namespace fs = std::filesystem;

namespace {

const std::string& kTiny = kTinyGpt2;

// The engine's allocations, tagged as the planner names its components.
const char* const kEngineComponents[] = {"params", "grads", "master_params", "optimizer_states", "gradient_buckets",
                                         "gathered_params"};

std::string shared_args(int ranks, int stage, bool offload) {
  return "--model " + kTiny + " --gpus " + std::to_string(ranks) + " --stage " + std::to_string(stage) +
         " --micro-batch 2 --seq 32 --precision fp32" + (offload ? " --offload-optimizer cpu" : "");
}

std::int64_t bytes_of(const nlohmann::json& object, const char* key) { return object.value(key, std::int64_t{0}); }

}  // namespace

TEST(ExecutorPrediction, RunPredictsWhatTheEngineAllocatesAndPlanAgrees) {
  for (int ranks : {1, 2})
    for (int stage = 0; stage <= 3; ++stage)
      for (bool offload : {false, true}) {
        if (offload && stage == 0) continue;  // ZeRO-Offload needs the partitioned states
        SCOPED_TRACE("ranks " + std::to_string(ranks) + ", stage " + std::to_string(stage) +
                     (offload ? ", optimizer on the CPU" : ""));
        const fs::path report = temp_dir() / "executor_prediction.json";
        fs::remove(report);
        const CommandResult r = run("run --backend cpu " + shared_args(ranks, stage, offload) +
                                    " --steps 1 --warmup-steps 0 --report " + report.string());
        ASSERT_EQ(r.status, 0) << r.output << r.errors;
        const nlohmann::json doc = nlohmann::json::parse(read_file(report));
        ASSERT_EQ(doc.at("plans").size(), 1u);
        const nlohmann::json& predicted = doc.at("plans")[0].at("gpu_bytes");
        const nlohmann::json& measured = doc.at("measured");
        for (const char* component : kEngineComponents) {
          EXPECT_EQ(bytes_of(predicted, component), bytes_of(measured.at("gpu_bytes"), component)) << component;
          for (const nlohmann::json& rank : measured.at("ranks"))
            EXPECT_EQ(bytes_of(predicted, component), bytes_of(rank.at("gpu_bytes"), component))
                << component << " of rank " << rank.at("rank");
        }
        if (offload) {
          // The plan counts the node's host memory: every rank's, all on this machine.
          std::int64_t host = 0;
          for (const auto& [tag, bytes] : measured.at("host_bytes").items()) host += bytes.get<std::int64_t>();
          EXPECT_GT(host, 0);
          // The offloaded states are pinned (pin_memory's default); host_bytes adds each rank's own process.
          EXPECT_EQ(doc.at("plans")[0].at("host_pinned_bytes").get<std::int64_t>(), ranks * host);
          EXPECT_GT(doc.at("plans")[0].at("host_bytes").get<std::int64_t>(), ranks * host);
          // What the kernel charged each rank holds the rank's share of those states and the process besides.
          for (const nlohmann::json& rank : measured.at("ranks"))
            EXPECT_GT(rank.at("host_resident_peak_bytes").get<std::int64_t>(), host) << "rank " << rank.at("rank");
        }
        // The standalone plan of the same inputs: the same figures, component by component.
        const CommandResult p = run("plan --engine zeroplan " + shared_args(ranks, stage, offload) + " --format json");
        ASSERT_EQ(p.status, 0) << p.output << p.errors;
        const nlohmann::json planned = nlohmann::json::parse(p.output);
        ASSERT_EQ(planned.at("plans").size(), 1u);
        EXPECT_EQ(planned.at("plans")[0].at("gpu_bytes"), predicted);
        EXPECT_EQ(planned.at("plans")[0].at("host_bytes"), doc.at("plans")[0].at("host_bytes"));
        fs::remove(report);
      }
}
