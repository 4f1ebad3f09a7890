// End-to-end tests of the simulator's commands: `plan`'s time columns (JSON and CSV), the timeline-peak verdict
// that `plan` and `recommend` share, and `simulate --trace` writing valid Chrome trace-event JSON.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_support.h"

namespace {

struct Output {
  int status = -1;
  std::string text;
};

// The process's scratch directory (cli_test_support.h: removed when every test of the process passed).
std::filesystem::path scratch() { return zeroplan_test::temp_dir(); }

Output zeroplan(const std::string& arguments) {
  const std::string command = std::string(ZEROPLAN_BINARY) + " " + arguments + " 2>/dev/null";
  Output result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.text.append(buffer.data(), n);
  const int raw = ::pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return result;
}

std::vector<std::string> split(const std::string& line, char separator) {
  std::vector<std::string> cells;
  std::stringstream stream(line);
  std::string cell;
  while (std::getline(stream, cell, separator)) cells.push_back(cell);
  if (!line.empty() && line.back() == separator) cells.emplace_back();
  return cells;
}

TEST(PlanTimes, CsvHasTheTimeColumns) {
  const Output result = zeroplan("plan --model gpt2-1.5b --gpus 4 --micro-batch 8 --seq 1024 --format csv");
  ASSERT_EQ(result.status, 0);
  std::stringstream lines(result.text);
  std::string header_line, row_line;
  std::getline(lines, header_line);
  std::getline(lines, row_line);
  const auto header = split(header_line, ',');
  const auto row = split(row_line, ',');
  ASSERT_EQ(header.size(), row.size());
  for (const char* column : {"step_seconds", "tokens_per_second", "mfu", "exposed_comm_seconds",
                             "timeline_peak_gpu_bytes", "sum_of_worst_cases_gpu_bytes"}) {
    const auto at = std::find(header.begin(), header.end(), column);
    ASSERT_NE(at, header.end()) << column;
    const std::string& cell = row[static_cast<std::size_t>(at - header.begin())];
    EXPECT_FALSE(cell.empty()) << column;
    EXPECT_GE(std::stod(cell), 0.0) << column;
  }
}

// `plan` judges GPU memory on the timeline peak: gpu_bytes is the breakdown at the peak (components add up to
// it), the memory model's sum of worst cases is carried beside it, and never below it.
TEST(PlanTimes, JsonCarriesTheTimelinePeakAndTheSumOfWorstCases) {
  const Output result = zeroplan("plan --model gpt2-1.5b --gpus 4 --micro-batch 8 --seq 1024 --format json");
  ASSERT_EQ(result.status, 0);
  const nlohmann::json document = nlohmann::json::parse(result.text);  // kept alive for the loop
  for (const auto& plan : document.at("plans")) {
    const std::int64_t total = plan.at("gpu_bytes").at("total").get<std::int64_t>();
    ASSERT_FALSE(plan.at("timeline_peak_gpu_bytes").is_null()) << plan.at("label");
    EXPECT_EQ(total, plan.at("timeline_peak_gpu_bytes").get<std::int64_t>()) << plan.at("label");
    EXPECT_LE(total, plan.at("sum_of_worst_cases_gpu_bytes").get<std::int64_t>()) << plan.at("label");
    EXPECT_GT(plan.at("step_seconds").get<double>(), 0.0);
  }
}

// Around the largest micro-batch `plan` reports, `plan` and `recommend` agree on what fits: recommend (one GPU
// count, one stage, no checkpointing, global batch = the micro-batch) offers micro-batch m with accumulation 1
// exactly when `plan` says m fits.
TEST(PlanTimes, PlanAndRecommendAgreeAboutFitting) {
  const std::string model = "--model gpt2-1.5b --gpus 1 --seq 1024 --stage 0";
  const Output probe = zeroplan("plan " + model + " --micro-batch 1 --format json");
  ASSERT_EQ(probe.status, 0);
  const std::int64_t largest = nlohmann::json::parse(probe.text).at("plans")[0].at("max_micro_batch");
  ASSERT_GT(largest, 1);
  for (std::int64_t micro : {largest - 1, largest, largest + 1}) {
    const Output plan = zeroplan("plan " + model + " --micro-batch " + std::to_string(micro) + " --format json");
    const bool plan_fits = nlohmann::json::parse(plan.text).at("plans")[0].at("fits").get<bool>();
    EXPECT_EQ(plan_fits, micro <= largest) << micro;
    const Output recommend =
        zeroplan("recommend " + model + " --checkpointing none --top 1000 --only-given-gpus --global-batch " +
                 std::to_string(micro) + " --format json");
    bool offered = false;
    std::string seen;
    const nlohmann::json offers = nlohmann::json::parse(recommend.text);  // kept alive for the loop
    for (const auto& r : offers.at("plans")) {
      const std::int64_t offered_micro = r.at("micro_batch").get<std::int64_t>();
      if (offered_micro == micro && r.at("grad_accum").get<std::int64_t>() == 1) offered = true;
      seen += " " + std::to_string(offered_micro);
    }
    EXPECT_EQ(offered, plan_fits) << "micro-batch " << micro << "; recommend offered micro-batches" << seen;
  }
}

// The trace opens in Perfetto / chrome://tracing: a traceEvents array of objects with ph, pid and name; "M"
// metadata naming the process and every track; complete events "X" with tid, ts and dur in microseconds ending
// at the step time; "C" counter samples of the GPU memory in time order.
TEST(SimulateTrace, WritesValidChromeTraceEventJson) {
  const auto path = scratch() / "trace.json";
  std::filesystem::remove(path);
  const Output result = zeroplan("simulate --model gpt2-1.5b --gpus 4 --micro-batch 4 --seq 1024 --stage 3 "
                                 "--offload-optimizer none --offload-param none --format json --trace " +
                                 path.string());
  ASSERT_EQ(result.status, 0);
  const double step_seconds = nlohmann::json::parse(result.text).at("plans")[0].at("step_seconds").get<double>();
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  const auto& events = trace.at("traceEvents");
  ASSERT_TRUE(events.is_array());
  std::set<int> named_tracks, used_tracks;
  bool process_named = false;
  double last_counter = -1.0, end = 0.0;
  int counters = 0;
  for (const auto& event : events) {
    ASSERT_TRUE(event.contains("ph") && event.contains("pid") && event.contains("name")) << event.dump();
    const std::string ph = event.at("ph");
    if (ph == "M") {
      if (event.at("name") == "process_name") process_named = true;
      if (event.at("name") == "thread_name") {
        EXPECT_FALSE(event.at("args").at("name").get<std::string>().empty());
        named_tracks.insert(event.at("tid").get<int>());
      }
    } else if (ph == "X") {
      const double ts = event.at("ts").get<double>(), dur = event.at("dur").get<double>();
      EXPECT_GE(ts, 0.0);
      EXPECT_GE(dur, 0.0);
      used_tracks.insert(event.at("tid").get<int>());
      end = std::max(end, ts + dur);
    } else if (ph == "C") {
      const double ts = event.at("ts").get<double>();
      EXPECT_GE(ts, last_counter);
      last_counter = ts;
      EXPECT_TRUE(event.at("args").at("in use").is_number());
      ++counters;
    } else {
      ADD_FAILURE() << "unexpected phase " << ph;
    }
  }
  EXPECT_TRUE(process_named);
  EXPECT_GE(counters, 2);
  for (int track : used_tracks) EXPECT_TRUE(named_tracks.count(track)) << "track " << track << " has no name";
  EXPECT_NEAR(end, step_seconds * 1e6, 1e-3 * step_seconds * 1e6) << "ts/dur must be microseconds";
}

}  // namespace
