// The measured view on multi-rank run reports: fixtures written by `zeroplan run --backend cpu` (tiny-gpt2, the
// DeepSpeed config beside them; commands in tests/gui/data/README.md). Every per-rank cell is the JSON's figure
// (read here independently with nlohmann/json), the communication rows stand beside the plan's bytes and the
// simulator's seconds for the run's own plan, a report for other inputs says which ones differ, and malformed
// reports are refused with the file, the field and what was expected. GoogleTest on the offscreen platform.
#include <QApplication>
#include <QBarSet>
#include <QLabel>
#include <QLocale>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "core/units.h"
#include "gui/error_reporter.h"
#include "tests/gui/recording_reporter.h"
#include "gui/input_panel.h"
#include "gui/main_window.h"
#include "gui/measured_view.h"
#include "gui/report_plan_match.h"
#include "gui/run_detail_view.h"
#include "gui/run_report.h"
#include "sim/simulator.h"

using namespace zeroplan;
using nlohmann::json;

namespace {

const std::string kData = ZEROPLAN_GUI_TEST_DATA;
const std::string kTwoRanks = kData + "/tiny-gpt2-cpu-2ranks-stage2.json";
const std::string kOneRank = kData + "/tiny-gpt2-cpu-1rank-stage0.json";
const std::string kOldReport = kData + "/gpt2-1.5b-report.json";
const std::string kDsConfig = kData + "/tiny-gpt2-ds-config.json";
const std::string kTinyModel = std::string(ZEROPLAN_SOURCE_DIR) + "/tests/cli/data/tiny-gpt2.json";

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// The unit a memory row's header names ("params (KiB)") in bytes.
double header_unit(const QTableWidget* table, int row) {
  const QString header = table->verticalHeaderItem(row)->text();
  if (header.endsWith("(GiB)")) return static_cast<double>(kGiB);
  if (header.endsWith("(MiB)")) return static_cast<double>(kMiB);
  if (header.endsWith("(KiB)")) return static_cast<double>(kKiB);
  ADD_FAILURE() << "row header names no memory unit: " << header.toStdString();
  return 1.0;
}

QString english(double value, int decimals) { return QLocale(QLocale::English).toString(value, 'f', decimals); }

// The inputs of the fixtures' runs, as a user sets them in the panel (the DeepSpeed config carries
// overlap_comm, micro-batch and stage; precision fp32 by the config's lack of an fp16/bf16 section).
GuiInputs fixture_inputs(int gpus) {
  GuiInputs in;
  in.model = kTinyModel;
  in.gpus = gpus;
  in.seq = 32;
  in.ds_config = kDsConfig;
  in.engine = TrainingEngine::zeroplan;
  return in;
}

class MultiRankReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    window_ = std::make_unique<MainWindow>();
    window_->setErrorReporter(std::make_unique<RecordingReporter>(&errors_));
  }

  RunDetailView* detail() const { return window_->measuredView()->detail(); }

  QStringList errors_;
  std::unique_ptr<MainWindow> window_;
};

TEST_F(MultiRankReportTest, PerRankTableHoldsEveryRanksFigures) {
  const json document = read_json(kTwoRanks);
  const json& measured = document.at("measured");
  const json& ranks = measured.at("ranks");
  const json& predicted = document.at("plans").at(0).at("gpu_bytes");
  ASSERT_EQ(measured.at("world_size").get<int>(), 2);
  ASSERT_EQ(ranks.size(), 2u);

  MeasuredView view;
  view.addReport(load_run_report(kTwoRanks));
  const QTableWidget* table = view.detail()->ranksTable();
  ASSERT_EQ(table->columnCount(), 1 + 2 + 1);  // predicted, rank 0, rank 1, spread
  EXPECT_EQ(table->horizontalHeaderItem(1)->text(), "rank 0");
  EXPECT_EQ(table->horizontalHeaderItem(2)->text(), "rank 1");

  // Every component either side has: a row when any figure is not 0, none when all are.
  std::set<std::string> components;
  for (const json* side : {&ranks.at(0).at("gpu_bytes"), &predicted}) {
    for (auto it = side->begin(); it != side->end(); ++it) {
      if (it.key() != "total") components.insert(it.key());
    }
  }
  int rows_checked = 0;
  for (const std::string& name : components) {
    const qlonglong p = predicted.value(name, 0LL);
    bool any = p != 0;
    for (const json& rank : ranks) any = any || rank.at("gpu_bytes").value(name, 0LL) != 0;
    const int row = view.detail()->ranksRow(QString::fromStdString(name));
    if (!any) {
      EXPECT_EQ(row, -1) << name << " is 0 everywhere and says nothing";
      continue;
    }
    ASSERT_GE(row, 0) << name;
    const double unit = header_unit(table, row);
    if (predicted.contains(name)) {
      EXPECT_EQ(table->item(row, 0)->data(Qt::UserRole).toLongLong(), p) << name;
      EXPECT_EQ(table->item(row, 0)->text(), english(static_cast<double>(p) / unit, 3)) << name;
    } else {
      EXPECT_EQ(table->item(row, 0)->text(), "not predicted") << name;
    }
    qlonglong low = -1, high = -1;
    for (int r = 0; r < 2; ++r) {
      const QTableWidgetItem* cell = table->item(row, 1 + r);
      if (!ranks.at(r).at("gpu_bytes").contains(name)) {
        EXPECT_EQ(cell->text(), "not measured") << name;
        continue;
      }
      const qlonglong bytes = ranks.at(r).at("gpu_bytes").at(name).get<qlonglong>();
      EXPECT_EQ(cell->data(Qt::UserRole).toLongLong(), bytes) << name << " rank " << r;
      EXPECT_EQ(cell->text(), english(static_cast<double>(bytes) / unit, 3)) << name << " rank " << r;
      low = low < 0 ? bytes : std::min(low, bytes);
      high = std::max(high, bytes);
    }
    if (low >= 0) EXPECT_EQ(table->item(row, 3)->data(Qt::UserRole).toLongLong(), high - low) << name;
    ++rows_checked;
  }
  EXPECT_GE(rows_checked, 6);

  // The total: no device view on the CPU backend, so each rank's allocator peak, beside the plan's total.
  const int total = view.detail()->ranksRow("total");
  ASSERT_GE(total, 0);
  EXPECT_TRUE(table->verticalHeaderItem(total)->text().startsWith("total, allocator peak"));
  EXPECT_EQ(table->item(total, 0)->data(Qt::UserRole).toLongLong(), predicted.at("total").get<qlonglong>());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks.at(r).at("device_used_peak_bytes").get<qlonglong>(), 0);
    EXPECT_EQ(table->item(total, 1 + r)->data(Qt::UserRole).toLongLong(),
              ranks.at(r).at("allocator_peak_bytes").get<qlonglong>());
  }
  EXPECT_EQ(view.detail()->ranksRow("allocator_peak"), -1);  // only beside a device view

  // Step time: the simulator's step the run recorded, each rank's median, the spread.
  const int step = view.detail()->ranksRow("step_seconds");
  ASSERT_GE(step, 0);
  EXPECT_EQ(table->item(step, 0)->data(Qt::UserRole).toDouble(), measured.at("predicted_step_seconds").get<double>());
  const double s0 = ranks.at(0).at("step_seconds").get<double>(), s1 = ranks.at(1).at("step_seconds").get<double>();
  EXPECT_EQ(table->item(step, 1)->data(Qt::UserRole).toDouble(), s0);
  EXPECT_EQ(table->item(step, 2)->data(Qt::UserRole).toDouble(), s1);
  EXPECT_EQ(table->item(step, 1)->text(), english(s0 * 1e3, 3));
  EXPECT_DOUBLE_EQ(table->item(step, 3)->data(Qt::UserRole).toDouble(), std::abs(s0 - s1));

  // The chart: the lowest and the highest rank beside the prediction.
  ASSERT_EQ(view.measuredSets().size(), 2u);
  EXPECT_EQ(view.measuredSets()[0]->label(), "lowest rank");
  EXPECT_EQ(view.measuredSets()[1]->label(), "highest rank");
}

TEST_F(MultiRankReportTest, CommunicationRowsStandBesideThePlans) {
  const json document = read_json(kTwoRanks);
  const json& plan = document.at("plans").at(0).at("comm_bytes_per_step");
  const json& measured = document.at("measured");
  MeasuredView view;
  view.addReport(load_run_report(kTwoRanks));
  const QTableWidget* table = view.detail()->commTable();
  qlonglong moved = 0;
  for (const char* kind : {"all_reduce", "reduce_scatter", "all_gather"}) {
    const int row = view.detail()->commRow(kind);
    ASSERT_GE(row, 0) << kind;
    const qlonglong p = plan.at(kind).get<qlonglong>(), m = measured.at("comm_bytes_per_step").at(kind).get<qlonglong>();
    EXPECT_EQ(table->item(row, RunDetailView::plan_bytes)->data(Qt::UserRole).toLongLong(), p) << kind;
    EXPECT_EQ(table->item(row, RunDetailView::measured_bytes)->data(Qt::UserRole).toLongLong(), m) << kind;
    EXPECT_EQ(table->item(row, RunDetailView::plan_bytes)->text(), QLocale(QLocale::English).toString(p)) << kind;
    // fp32 on the CPU backend: the bytes counted where each collective is issued are the plan's.
    EXPECT_EQ(m, p) << kind;
    EXPECT_EQ(table->item(row, RunDetailView::bytes_difference)->text(), "equal") << kind;
    EXPECT_EQ(table->item(row, RunDetailView::rank_spread)->text(), "equal on 2 ranks") << kind;
    EXPECT_EQ(table->item(row, RunDetailView::measured_ms)->data(Qt::UserRole).toDouble(),
              measured.at("comm_seconds_per_step").at(kind).get<double>())
        << kind;
    moved += m;
  }
  EXPECT_EQ(moved, 2 * plan.at("reduce_scatter").get<qlonglong>());  // stage 2: reduce-scatter + all-gather of Ψ
  const int exposed = view.detail()->commRow("exposed");
  ASSERT_GE(exposed, 0);
  EXPECT_EQ(table->item(exposed, RunDetailView::measured_ms)->data(Qt::UserRole).toDouble(),
            measured.at("exposed_comm_seconds").get<double>());

  // A count that is not the plan's shows the difference, exactly.
  json changed = document;
  const qlonglong planned = plan.at("reduce_scatter").get<qlonglong>();
  changed["measured"]["comm_bytes_per_step"]["reduce_scatter"] = planned + 1000;
  changed["measured"]["ranks"][1]["comm_bytes_per_step"]["reduce_scatter"] = planned + 1000;
  view.addReport(run_report_from_json(changed, "changed.json"));
  const int row = view.detail()->commRow("reduce_scatter");
  EXPECT_EQ(table->item(row, RunDetailView::bytes_difference)->text(), "+1,000");
  EXPECT_EQ(table->item(row, RunDetailView::bytes_difference)->data(Qt::UserRole).toLongLong(), 1000);
  EXPECT_EQ(table->item(row, RunDetailView::rank_spread)->text(), "1,000");
}

TEST_F(MultiRankReportTest, MatchedWithTheGuisPlanOfTheRunsStage) {
  ASSERT_TRUE(window_->applyInputs(fixture_inputs(2))) << errors_.join("\n").toStdString();
  const Comparison& c = *window_->comparison();
  // The GUI shows another stage's plan; the report is still compared with stage 2's.
  window_->selectPlan(c.index_of(PlanChoice{0, OffloadDevice::none, OffloadDevice::none}));
  ASSERT_TRUE(window_->openRunReport(QString::fromStdString(kTwoRanks))) << errors_.join("\n").toStdString();
  const ReportPlanMatch& match = window_->measuredView()->selectedMatch();
  ASSERT_TRUE(match.matched()) << (match.differences.empty() ? "" : match.differences.front());
  const PlanChoice stage2{2, OffloadDevice::none, OffloadDevice::none};
  EXPECT_EQ(match.plan_index, c.index_of(stage2));
  // The run recorded its simulator's step; the GUI's simulator gives the same for the same inputs.
  EXPECT_EQ(match.step_disagreement, "");
  EXPECT_TRUE(match.problem.empty()) << match.problem;

  // The simulator's seconds per kind, as the simulator itself gives them for that plan.
  const StepSimulation sim = simulate_step(c.model, c.cluster, c.training, stage2);
  const QTableWidget* table = detail()->commTable();
  for (const char* kind : {"all_reduce", "reduce_scatter", "all_gather"}) {
    double seconds = 0.0;
    for (const CollectiveTiming& timing : sim.collectives) {
      if (to_string(timing.kind) == kind) seconds += timing.seconds;
    }
    const QTableWidgetItem* cell = table->item(detail()->commRow(kind), RunDetailView::simulated_ms);
    EXPECT_DOUBLE_EQ(cell->data(Qt::UserRole).toDouble(), seconds) << kind;
  }
  EXPECT_GT(table->item(detail()->commRow("reduce_scatter"), RunDetailView::simulated_ms)->data(Qt::UserRole).toDouble(),
            0.0);
  EXPECT_DOUBLE_EQ(table->item(detail()->commRow("exposed"), RunDetailView::simulated_ms)->data(Qt::UserRole).toDouble(),
                   sim.exposed_comm_seconds);
  EXPECT_TRUE(detail()->summary()->text().contains("stage 2")) << detail()->summary()->text().toStdString();
  EXPECT_TRUE(errors_.isEmpty());
}

// A training field added after a report was written (deterministic, 2026-11-29) reads, where the report lacks it,
// as the behaviour from before it existed; a run that set it otherwise still differs, by name.
TEST_F(MultiRankReportTest, AFieldAddedAfterTheReportReadsAsTheBehaviourBeforeIt) {
  ASSERT_TRUE(window_->applyInputs(fixture_inputs(2))) << errors_.join("\n").toStdString();
  // A report from before --deterministic: the fixture's (regenerated since) without the field.
  json document = json::parse(std::ifstream(kTwoRanks));
  ASSERT_TRUE(document.at("training").contains("deterministic"));
  document["training"].erase("deterministic");
  const ReportPlanMatch older = match_report_to_plan(run_report_from_json(document, "older.json"), &*window_->comparison());
  EXPECT_TRUE(older.matched()) << (older.differences.empty() ? "" : older.differences.front());
  json other = document;
  other["training"]["deterministic"] = true;
  const ReportPlanMatch differing = match_report_to_plan(run_report_from_json(other, "other.json"), &*window_->comparison());
  ASSERT_EQ(differing.differences.size(), 1u);
  EXPECT_EQ(differing.differences.front(), "deterministic: false in the GUI, true in the run");
  // A field no report of any age lacks is not read as anything: missing, it differs.
  json broken = document;
  broken["training"].erase("fp32_loss");
  const ReportPlanMatch missing = match_report_to_plan(run_report_from_json(broken, "broken.json"), &*window_->comparison());
  ASSERT_EQ(missing.differences.size(), 1u);
  EXPECT_EQ(missing.differences.front(), "fp32_loss: false in the GUI, (none) in the run");
}

TEST_F(MultiRankReportTest, OtherInputsAreSaidPlainlyAndTheRunsInputsCanBeTaken) {
  GuiInputs one_gpu = fixture_inputs(1);
  ASSERT_TRUE(window_->applyInputs(one_gpu)) << errors_.join("\n").toStdString();
  ASSERT_TRUE(window_->openRunReport(QString::fromStdString(kTwoRanks)));
  const ReportPlanMatch& match = window_->measuredView()->selectedMatch();
  EXPECT_FALSE(match.matched());
  ASSERT_EQ(match.differences.size(), 1u);
  EXPECT_EQ(match.differences.front(), "GPUs: 1 in the GUI, 2 ranks in the run");
  const QString summary = detail()->summary()->text();
  EXPECT_TRUE(summary.contains("No simulator figures")) << summary.toStdString();
  EXPECT_TRUE(summary.contains("GPUs: 1 in the GUI, 2 ranks in the run")) << summary.toStdString();
  const QTableWidget* table = detail()->commTable();
  EXPECT_EQ(table->item(detail()->commRow("reduce_scatter"), RunDetailView::simulated_ms)->text(), "no plan");
  // The report's own figures stay: its plan is for its world size and stage.
  EXPECT_EQ(table->item(detail()->commRow("reduce_scatter"), RunDetailView::plan_bytes)->data(Qt::UserRole).toLongLong(),
            read_json(kTwoRanks).at("plans").at(0).at("comm_bytes_per_step").at("reduce_scatter").get<qlonglong>());

  // "Use the run's inputs": the GUI takes the run's model, GPUs, micro-batch, sequence, precision and engine.
  ASSERT_TRUE(window_->useRunInputs(0)) << errors_.join("\n").toStdString();
  EXPECT_EQ(window_->comparison()->cluster.total_gpus(), 2);
  EXPECT_EQ(window_->inputPanel()->gpusBox()->value(), 2);
  EXPECT_EQ(window_->comparison()->training.engine, TrainingEngine::zeroplan);
  EXPECT_EQ(window_->comparison()->training.micro_batch, 2);
  EXPECT_EQ(window_->comparison()->training.precision, Precision::fp32);
  for (const std::string& difference : window_->measuredView()->selectedMatch().differences) {
    for (const char* taken : {"GPUs", "engine", "micro_batch", "seq_len", "precision", "model"}) {
      EXPECT_NE(difference.rfind(taken, 0), 0u) << difference;
    }
  }
}

TEST_F(MultiRankReportTest, OneRankAndOlderReportsStillShow) {
  MeasuredView view;
  view.addReport(load_run_report(kOneRank));
  const json one = read_json(kOneRank);
  EXPECT_EQ(view.reports().front().world_size, 1);
  EXPECT_EQ(view.detail()->ranksTable()->columnCount(), 3);  // predicted, rank 0, spread
  const int params = view.detail()->ranksRow("params");
  ASSERT_GE(params, 0);
  EXPECT_EQ(view.detail()->ranksTable()->item(params, 1)->data(Qt::UserRole).toLongLong(),
            one.at("measured").at("ranks").at(0).at("gpu_bytes").at("params").get<qlonglong>());
  for (const char* kind : {"all_reduce", "reduce_scatter", "all_gather"}) {
    const QTableWidgetItem* cell = view.detail()->commTable()->item(view.detail()->commRow(kind), RunDetailView::measured_bytes);
    EXPECT_EQ(cell->data(Qt::UserRole).toLongLong(), 0) << kind;  // one rank: nothing to exchange
  }
  ASSERT_EQ(view.measuredSets().size(), 1u);

  // A report written before ranks were recorded: shown, and said to have no per-rank section.
  view.addReport(load_run_report(kOldReport));
  EXPECT_TRUE(view.reports().back().ranks.empty());
  EXPECT_TRUE(view.detail()->summary()->text().contains("no per-rank section"));
  EXPECT_EQ(view.detail()->ranksTable()->columnCount(), 1);
  EXPECT_EQ(view.detail()->commTable()->item(view.detail()->commRow("all_gather"), RunDetailView::measured_bytes)->text(),
            "not measured");
}

// A GPU run with offload (2x H200, the 17.1B model with optimizer and parameters on the CPU, 2026-11-26): the node's
// host memory at its peak beside the plan's host total; a report without the figure shows no such line.
TEST_F(MultiRankReportTest, TheNodesHostMemoryStandsBesideThePlan) {
  const std::string path = std::string(ZEROPLAN_SOURCE_DIR) +
                           "/bench/exec/results/2026-11-26-offload-h200/largest_offload_l35.json";
  const json document = read_json(path);
  const Bytes measured = document.at("measured").at("host_node_used_peak_bytes").get<Bytes>();
  const Bytes planned = document.at("plans").at(0).at("host_bytes").get<Bytes>();
  MeasuredView view;
  view.addReport(load_run_report(path));
  const QString summary = view.detail()->summary()->text();
  EXPECT_TRUE(summary.contains("Host memory of the node at its peak")) << summary.toStdString();
  EXPECT_TRUE(summary.contains(QString::fromStdString(format_bytes(measured)))) << summary.toStdString();
  EXPECT_TRUE(summary.contains(QString::fromStdString(format_bytes(planned)))) << summary.toStdString();

  MeasuredView without;
  without.addReport(load_run_report(kTwoRanks));
  EXPECT_FALSE(without.detail()->summary()->text().contains("Host memory of the node"));
}

// Every report `zeroplan run` wrote on the GPUs and that is kept in bench/exec/results/ opens (a stage-3 plan's
// fractional multiple_of_params once stopped them).
TEST_F(MultiRankReportTest, EveryStoredGpuRunReportOpens) {
  int opened = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(std::string(ZEROPLAN_SOURCE_DIR) +
                                                                         "/bench/exec/results")) {
    if (entry.path().extension() != ".json") continue;
    const json document = read_json(entry.path().string());
    if (!document.is_object() || !document.contains("plans") || !document.contains("measured")) continue;  // not a run report
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(load_run_report(entry.path()));
    ++opened;
  }
  EXPECT_GE(opened, 80);  // 85 on 2026-11-26
}

// A malformed report: refused through the window with the file, the field and what was expected; nothing added.
struct Malformed {
  const char* name;
  std::function<void(json&)> change;
  std::vector<std::string> expected;  // parts of the message
};

TEST_F(MultiRankReportTest, MalformedReportsAreRefusedNamingTheField) {
  const json document = read_json(kTwoRanks);
  const std::vector<Malformed> cases = {
      {"no ranks", [](json& d) { d["measured"].erase("ranks"); }, {"field 'measured.ranks'", "missing"}},
      {"ranks not an array", [](json& d) { d["measured"]["ranks"] = "two"; },
       {"field 'measured.ranks'", "expected an array with one object per rank, got string"}},
      {"one rank of two", [](json& d) { d["measured"]["ranks"].erase(1); },
       {"field 'measured.ranks'", "expected 2 entries (measured.world_size), got 1"}},
      {"rank out of order", [](json& d) { d["measured"]["ranks"][1]["rank"] = 0; },
       {"field 'measured.ranks[1].rank'", "expected 1"}},
      {"bytes as text", [](json& d) { d["measured"]["ranks"][1]["gpu_bytes"]["params"] = "big"; },
       {"field 'measured.ranks[1].gpu_bytes.params'"}},
      {"rank not an object", [](json& d) { d["measured"]["ranks"][0] = 5; },
       {"field 'measured.ranks[0]'", "expected an object"}},
      {"world size as text", [](json& d) { d["measured"]["world_size"] = "2"; }, {"field 'measured.world_size'"}},
      {"ranks without a world size", [](json& d) { d["measured"].erase("world_size"); },
       {"field 'measured.world_size'", "missing"}},
      {"stage not the plan's", [](json& d) { d["measured"]["stage"] = 1; },
       {"field 'measured.stage'", "stage 1", "stage 2"}},
      {"comm bytes not an object", [](json& d) { d["measured"]["comm_bytes_per_step"] = 7; },
       {"field 'measured.comm_bytes_per_step'", "expected a JSON object"}},
      {"negative comm seconds", [](json& d) { d["measured"]["comm_seconds_per_step"]["all_gather"] = -1.0; },
       {"field 'measured.comm_seconds_per_step.all_gather'"}},
      {"plan without a kind", [](json& d) { d["plans"][0]["comm_bytes_per_step"].erase("reduce_scatter"); },
       {"field 'plans[0].comm_bytes_per_step.reduce_scatter'", "missing"}},
      {"negative node host memory", [](json& d) { d["measured"]["host_node_used_peak_bytes"] = -5; },
       {"field 'measured.host_node_used_peak_bytes'"}},
  };
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  for (const Malformed& c : cases) {
    json changed = document;
    c.change(changed);
    const std::string path = dir.filePath(QString(c.name).replace(' ', '-') + ".json").toStdString();
    std::ofstream(path) << changed.dump(2);
    errors_.clear();
    const std::size_t before = window_->measuredView()->reports().size();
    EXPECT_FALSE(window_->openRunReport(QString::fromStdString(path))) << c.name;
    ASSERT_EQ(errors_.size(), 1) << c.name;
    const std::string message = errors_.front().toStdString();
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << c.name << ": " << message;  // the file first
    for (const std::string& part : c.expected) EXPECT_NE(message.find(part), std::string::npos) << c.name << ": " << message;
    EXPECT_EQ(window_->measuredView()->reports().size(), before) << c.name;
  }
  // The unchanged fixture loads.
  errors_.clear();
  EXPECT_TRUE(window_->openRunReport(QString::fromStdString(kTwoRanks))) << errors_.join("\n").toStdString();
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
