// `zeroplan run --trace FILE` (run/measured_trace.h): the timed steps' median step of each rank, as the ZeRO
// engine marked it on its lanes, beside the plan's timeline in one Chrome trace-event file per rank.
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_support.h"

using namespace zeroplan_test;

namespace {

const std::string kStage3Run = "run --model " + kTinyGpt2 +
                               " --backend cpu --gpus 2 --stage 3 --offload-optimizer cpu --micro-batch 2 --seq 64 "
                               "--steps 5 --warmup-steps 1 --cluster h200x2";

// The measured process's events of one kind ("X" intervals, "i" instants) on one lane.
std::vector<nlohmann::json> measured(const nlohmann::json& doc, int pid, const std::string& ph,
                                     const std::string& lane) {
  std::vector<nlohmann::json> out;
  for (const auto& e : doc.at("traceEvents"))
    if (e.value("pid", -1) == pid && e.value("ph", "") == ph && e.value("cat", "") == lane) out.push_back(e);
  return out;
}

}  // namespace

TEST(RunTrace, EachRanksMedianStepBesideThePlan) {
  const std::filesystem::path trace = fresh("trace.json");
  const CommandResult result = run(kStage3Run + " --trace " + trace.string());
  ASSERT_EQ(result.status, 0) << result.output << result.errors;
  EXPECT_NE(result.output.find("trace written to " + trace.string()), std::string::npos) << result.output;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::filesystem::path file =
        rank == 0 ? trace : trace.parent_path() / ("trace.rank" + std::to_string(rank) + ".json");
    const nlohmann::json doc = nlohmann::json::parse(read_file(file));
    const int pid = 2 + rank;
    // The plan's timeline is process 1, with its own step.
    int predicted = 0;
    for (const auto& e : doc.at("traceEvents")) predicted += e.value("pid", -1) == 1 && e.value("ph", "") == "X";
    EXPECT_GT(predicted, 0);
    EXPECT_GT(doc.at("otherData").at("step_seconds").get<double>(), 0.0);
    // The measured step is one of the timed steps (the first is warm-up); its phases, end to end, lie in it.
    const auto& other = doc.at("otherData");
    EXPECT_EQ(other.at("measured_rank").get<int>(), rank);
    const std::int64_t step = other.at("measured_step").get<std::int64_t>();
    EXPECT_GE(step, 2);
    EXPECT_LE(step, 5);
    const double step_us = other.at("measured_step_seconds").get<double>() * 1e6;
    const auto phases = measured(doc, pid, "X", "phases");
    ASSERT_EQ(phases.size(), 3u);
    double forward_end = 0.0, backward_end = 0.0, sum = 0.0;
    for (const auto& p : phases) {
      sum += p.at("dur").get<double>();
      if (p.at("name") == "forward") forward_end = p.at("ts").get<double>() + p.at("dur").get<double>();
      if (p.at("name") == "backward") backward_end = p.at("ts").get<double>() + p.at("dur").get<double>();
    }
    // (On the GPU the optimizer phase is the step less the others; on the CPU each phase is timed on its own.)
    EXPECT_LE(sum, step_us * (1 + 1e-6) + 1.0);
    EXPECT_GT(forward_end, 0.0);
    EXPECT_GT(backward_end, forward_end);
    // Every interval of every lane lies inside the step (the lanes share the step's first mark as their zero).
    for (const auto& e : doc.at("traceEvents")) {
      if (e.value("pid", -1) != pid || e.value("ph", "") != "X") continue;
      EXPECT_GE(e.at("ts").get<double>(), 0.0) << e.dump();
      EXPECT_LE(e.at("ts").get<double>() + e.at("dur").get<double>(), step_us * (1 + 1e-6) + 1.0) << e.dump();
    }
    // Stage 3: the reduce-scatters come in backward, never before it; the persistent all-gather after the update.
    const auto collectives = measured(doc, pid, "X", "collectives");
    int reduce_scatters = 0, all_gathers_after_backward = 0;
    for (const auto& c : collectives) {
      if (c.at("name") == "reduce_scatter") {
        ++reduce_scatters;
        EXPECT_GE(c.at("ts").get<double>(), forward_end) << c.dump();
      }
      if (c.at("name") == "all_gather" && c.at("ts").get<double>() >= backward_end) ++all_gathers_after_backward;
    }
    EXPECT_GT(reduce_scatters, 0);
    EXPECT_GT(all_gathers_after_backward, 0);
    // The offloaded gradients' copies to the host.
    EXPECT_FALSE(measured(doc, pid, "X", "D2H").empty());
    // Each parameter unit forward uses begins in forward, and backward uses it again.
    std::set<std::string> forward_units, backward_units;
    for (const auto& u : measured(doc, pid, "i", "compute")) {
      const double ts = u.at("ts").get<double>();
      (ts < forward_end ? forward_units : backward_units).insert(u.at("name").get<std::string>());
    }
    EXPECT_TRUE(forward_units.count("unit 0")) << doc.dump();
    EXPECT_EQ(forward_units, backward_units);
  }
}

TEST(RunTrace, FilesThatExistAreKeptAndBadPathsRefused) {
  const std::filesystem::path trace = write_temp("kept.json", "a trace the user made\n");
  expect_one_line_error(run(kStage3Run + " --trace " + trace.string()), {trace.string(), "--trace", "--overwrite"});
  EXPECT_EQ(read_file(trace), "a trace the user made\n");
  // Another rank's file is checked before anything runs, too.
  const std::filesystem::path fresh_trace = fresh("other.json");
  const std::filesystem::path rank1 = write_temp("other.rank1.json", "rank 1's\n");
  expect_one_line_error(run(kStage3Run + " --trace " + fresh_trace.string()), {rank1.string(), "--trace"});
  EXPECT_EQ(read_file(rank1), "rank 1's\n");
  EXPECT_FALSE(std::filesystem::exists(fresh_trace));
  expect_one_line_error(run(kStage3Run + " --trace /no/such/folder/t.json"), {"/no/such/folder", "--trace"});
  expect_one_line_error(run(kStage3Run + " --overwrite"), {"--overwrite", "--trace"});
  // With --overwrite the file is replaced by the trace.
  ASSERT_EQ(run(kStage3Run + " --trace " + trace.string() + " --overwrite").status, 0);
  EXPECT_TRUE(nlohmann::json::parse(read_file(trace)).contains("traceEvents"));
}
