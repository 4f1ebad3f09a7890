// The GUI against the planner and simulator directly: an input change shows the planner's numbers in the bars
// and the table; a bad file is reported (the InputError's message) and leaves the previous state intact; run
// reports, CSV export, the timeline and screenshot mode work headless (QT_QPA_PLATFORM=offscreen).
#include <QBarSet>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QFile>
#include <QImage>
#include <QLineSeries>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/cluster_description.h"
#include "core/data_paths.h"
#include "core/input_error.h"
#include "core/model_description.h"
#include "core/units.h"
#include "gui/comparison.h"
#include "gui/error_reporter.h"
#include "tests/gui/recording_reporter.h"
#include "gui/input_panel.h"
#include "gui/main_window.h"
#include "gui/measured_view.h"
#include "gui/memory_chart.h"
#include "gui/plan_table_model.h"
#include "gui/screenshot.h"
#include "gui/storage_chart.h"
#include "gui/timeline_chart.h"
#include "sim/plan_timing.h"
#include "sim/plan_json.h"
#include "sim/planner.h"
#include "sim/simulator.h"

using namespace zeroplan;

namespace {

constexpr const char* kModel = "gpt2-124m";

// The planner called directly, as `zeroplan plan` does for the same inputs (verdicts on the timeline's peak).
std::vector<PlanResult> planner_directly(const ClusterDescription& cluster, std::int64_t micro_batch,
                                         Checkpointing checkpointing = Checkpointing::none,
                                         TrainingEngine engine = TrainingEngine::deepspeed) {
  ModelDescription model = load_model(kModel);
  TrainingConfig training;
  // What `zeroplan plan --engine` applies (core/plan_inputs.cpp): the engine's kernels, and no dropout for ours.
  use_engine(training, engine);
  if (engine == TrainingEngine::zeroplan) model.transformer->dropout = 0;
  training.seq_len = model.transformer->max_seq;
  training.micro_batch = micro_batch;
  training.checkpointing = checkpointing;
  std::vector<PlanResult> plans;
  for (TimedPlan& timed : evaluate_timed_plans(model, cluster, training, enumerate_plan_choices(), gui_planner_options()))
    plans.push_back(std::move(timed.plan));
  return plans;
}

void write_file(const QString& path, const std::string& text) {
  std::ofstream out(path.toStdString());
  out << text;
}

}  // namespace

class MainWindowTest : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<MainWindow> window_;
  QStringList errors_;
  QTemporaryDir dir_;

  // Every bar segment and every table cell of every component equals the planner's bytes.
  void expectShows(const std::vector<PlanResult>& expected) {
    const Comparison& shown = *window_->comparison();
    QCOMPARE(shown.plans.size(), expected.size());
    PlanTableModel* table = window_->planModel();
    QCOMPARE(table->rowCount(), static_cast<int>(expected.size()));
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const int row = static_cast<int>(i);
      QCOMPARE(shown.plans[i].choice, expected[i].choice);
      for (const auto& [name, bytes] : expected[i].memory.gpu.components()) {
        QBarSet* set = window_->memoryChart()->componentSet(QString::fromStdString(name));
        QVERIFY2(set, name.c_str());
        QCOMPARE(set->at(row), to_gib(bytes));
        const int column = table->column(QString::fromStdString(name) + "_bytes");
        QVERIFY2(column >= 0, name.c_str());
        QCOMPARE(table->data(table->index(row, column), Qt::UserRole).toLongLong(), static_cast<qlonglong>(bytes));
      }
      const int total = table->column("gpu_total_bytes");
      QCOMPARE(table->data(table->index(row, total), Qt::UserRole).toLongLong(),
               static_cast<qlonglong>(expected[i].memory.gpu.total));
      QCOMPARE(table->data(table->index(row, table->column("fits")), Qt::DisplayRole).toString().startsWith("fits"),
               expected[i].fits);
      Bytes all_gather = 0;
      for (const CollectiveVolume& volume : expected[i].comm.collectives) {
        if (volume.kind == CollectiveKind::all_gather) all_gather += volume.bytes;
      }
      QCOMPARE(table->data(table->index(row, table->column("all_gather_bytes")), Qt::UserRole).toLongLong(),
               static_cast<qlonglong>(all_gather));
      // Host bars run in reverse (the table's row order read top-down).
      const int bar = static_cast<int>(expected.size()) - 1 - row;
      QCOMPARE(window_->storageChart()->hostSet()->at(bar), to_gib(expected[i].memory.host.total));
      QCOMPARE(window_->storageChart()->nvmeSet()->at(bar), to_gib(expected[i].memory.nvme_bytes));
    }
    QCOMPARE(window_->memoryChart()->capacityGiB(), to_gib(shown.cluster.gpu_memory_bytes));
  }

 private slots:
  void init() {
    QVERIFY(dir_.isValid());
    errors_.clear();
    window_ = std::make_unique<MainWindow>();
    window_->setErrorReporter(std::make_unique<RecordingReporter>(&errors_));
    GuiInputs inputs;
    inputs.model = kModel;
    QVERIFY(window_->applyInputs(inputs));
    QVERIFY(errors_.isEmpty());
  }

  void cleanup() { window_.reset(); }

  void inputChangesShowThePlannersNumbers() {
    const ClusterDescription cluster = load_cluster(kDefaultClusterName);
    expectShows(planner_directly(cluster, 1));

    // Micro-batch 4 in the spin box: the bars and the table follow at once, and they did change.
    const auto before = window_->comparison()->plans;
    window_->inputPanel()->microBatchBox()->setValue(4);
    const auto expected = planner_directly(cluster, 4);
    QVERIFY(expected.front().memory.gpu.activations != before.front().memory.gpu.activations);
    expectShows(expected);

    // Full checkpointing.
    const int full = window_->inputPanel()->checkpointingBox()->findData(static_cast<int>(Checkpointing::full));
    window_->inputPanel()->checkpointingBox()->setCurrentIndex(full);
    expectShows(planner_directly(cluster, 4, Checkpointing::full));

    // Two GPUs of the cluster's kind.
    window_->inputPanel()->gpusBox()->setValue(2);
    expectShows(planner_directly(with_gpu_count(cluster, 2), 4, Checkpointing::full));

    // Each engine the planner models (zeroplan plan --engine): the figures follow, and they differ from DeepSpeed's.
    const auto deepspeed = planner_directly(with_gpu_count(cluster, 2), 4, Checkpointing::full);
    for (TrainingEngine engine : {TrainingEngine::zeroplan, TrainingEngine::ideal}) {
      QComboBox* box = window_->inputPanel()->engineBox();
      const int index = box->findData(static_cast<int>(engine));
      QVERIFY2(index >= 0, to_string(engine).c_str());
      box->setCurrentIndex(index);
      QCOMPARE(window_->comparison()->training.engine, engine);
      const auto expected = planner_directly(with_gpu_count(cluster, 2), 4, Checkpointing::full, engine);
      QVERIFY(expected.back().memory.gpu.total != deepspeed.back().memory.gpu.total);
      expectShows(expected);
    }
    QVERIFY(errors_.isEmpty());
  }

  // The host speed field (zeroplan plan --host-op-seconds): a slower host slows DeepSpeed's stage-3 plans and no
  // other, moves no memory, and the note under the inputs says which host the steps are timed for.
  void hostSpeedScalesStageThreeAndSaysForWhichHost() {
    InputPanel* panel = window_->inputPanel();
    panel->clusterBox()->setCurrentIndex(panel->clusterBox()->findData(QString("h200x2")));
    QVERIFY(errors_.isEmpty());
    QVERIFY(panel->hostSpeedBox()->isEnabled());
    QCOMPARE(panel->hostSpeedBox()->value(), 0.0);  // the cluster's own host
    QVERIFY2(panel->summaryLabel()->text().contains("h200x2 host.multi_rank_eager_op_seconds"),
             qPrintable(panel->summaryLabel()->text()));
    const Comparison own = *window_->comparison();
    const SimulatedPlans own_times = window_->simulated();

    panel->hostSpeedBox()->setValue(11.4);
    QVERIFY(errors_.isEmpty());
    QCOMPARE(window_->comparison()->training.host_eager_op_seconds, 11.4e-6);
    const SimulatedPlans& slow = window_->simulated();
    int stage3 = 0;
    for (std::size_t i = 0; i < own.plans.size(); ++i) {
      QCOMPARE(window_->comparison()->plans[i].memory.gpu.total, own.plans[i].memory.gpu.total);
      QVERIFY(own_times.timings[i] && slow.timings[i]);
      const PlanChoice& choice = own.plans[i].choice;
      if (choice.stage == 3) {
        // Every stage-3 plan waits longer on the host; without offload (no PCIe or disk to wait for instead)
        // GPT-2 124M's step is the host's: 134 -> 214 ms for 1.65x the host time per operation.
        ++stage3;
        QVERIFY(slow.timings[i]->step_seconds > own_times.timings[i]->step_seconds);
        if (choice.offload_optimizer == OffloadDevice::none && choice.offload_param == OffloadDevice::none)
          QVERIFY(slow.timings[i]->step_seconds > 1.5 * own_times.timings[i]->step_seconds);
      } else {
        QCOMPARE(slow.timings[i]->step_seconds, own_times.timings[i]->step_seconds);
      }
    }
    QVERIFY(stage3 > 0);
    QVERIFY2(panel->summaryLabel()->text().contains("the host given by the host speed field (11.40 us"),
             qPrintable(panel->summaryLabel()->text()));

    // Below what a CUDA launch can take: refused, naming the field, and the previous state stays.
    panel->hostSpeedBox()->setValue(0.05);
    QCOMPARE(errors_.size(), 1);
    QVERIFY2(errors_.front().contains("host speed"), qPrintable(errors_.front()));
    QCOMPARE(window_->comparison()->training.host_eager_op_seconds, 11.4e-6);
    QCOMPARE(panel->hostSpeedBox()->value(), 11.4);

    // Our executor has no DeepSpeed host costs: the field turns off and its plans' steps are the planner's own.
    panel->engineBox()->setCurrentIndex(panel->engineBox()->findData(static_cast<int>(TrainingEngine::zeroplan)));
    QVERIFY(!panel->hostSpeedBox()->isEnabled());
    QCOMPARE(window_->comparison()->training.host_eager_op_seconds, 0.0);
    QVERIFY(!panel->summaryLabel()->text().contains("host-bound"));

    // A cluster that names no measured host has nothing to scale from.
    panel->engineBox()->setCurrentIndex(panel->engineBox()->findData(static_cast<int>(TrainingEngine::deepspeed)));
    panel->clusterBox()->setCurrentIndex(panel->clusterBox()->findData(QString("h100x8")));
    QVERIFY(!panel->hostSpeedBox()->isEnabled());
    QCOMPARE(errors_.size(), 1);
  }

  void badModelFileIsReportedAndThePreviousStateStays() {
    window_->inputPanel()->microBatchBox()->setValue(2);
    const auto before = window_->comparison()->plans;
    const double params_bar = window_->memoryChart()->componentSet("params")->at(0);
    const QString bad = dir_.filePath("broken-model.json");
    write_file(bad, "{ \"transformer\": { \"hidden\": 768, ");  // cut off

    window_->inputPanel()->openModelFile(bad);
    QCOMPARE(errors_.size(), 1);
    QVERIFY2(errors_.front().contains(bad), qPrintable(errors_.front()));
    QCOMPARE(window_->comparison()->model.name, load_model(kModel).name);
    QCOMPARE(window_->comparison()->training.micro_batch, std::int64_t{2});
    QCOMPARE(window_->comparison()->plans.size(), before.size());
    for (std::size_t i = 0; i < before.size(); ++i) {
      QCOMPARE(window_->comparison()->plans[i].memory.gpu.total, before[i].memory.gpu.total);
    }
    QCOMPARE(window_->memoryChart()->componentSet("params")->at(0), params_bar);
    // The panel shows the previous model again, and the bad file left no entry behind.
    QCOMPARE(window_->inputPanel()->modelBox()->currentData().toString(), QString(kModel));
    QCOMPARE(window_->inputPanel()->modelBox()->findData(bad), -1);
    QCOMPARE(window_->inputPanel()->microBatchBox()->value(), 2);

    // A field with a wrong value names the field.
    const QString negative = dir_.filePath("negative-model.json");
    write_file(negative, R"({"name": "bad", "transformer": {"family": "gpt2", "vocab_size": 50257, "hidden": -768,
      "layers": 12, "heads": 12, "max_seq": 1024}})");
    window_->inputPanel()->openModelFile(negative);
    QCOMPARE(errors_.size(), 2);
    QVERIFY2(errors_.back().contains("hidden"), qPrintable(errors_.back()));
    QCOMPARE(window_->comparison()->model.name, load_model(kModel).name);
  }

  void badDeepSpeedConfigIsReportedAndThePreviousStateStays() {
    const auto before_total = window_->comparison()->plans.front().memory.gpu.total;
    const QString bad = dir_.filePath("ds-bad-stage.json");
    write_file(bad, R"({ // a user's config
      "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 7}})");
    window_->inputPanel()->openDeepSpeedConfig(bad);
    QCOMPARE(errors_.size(), 1);
    QVERIFY2(errors_.front().contains("stage"), qPrintable(errors_.front()));
    QVERIFY(!window_->comparison()->inputs.ds_config.has_value());
    QCOMPARE(window_->comparison()->plans.front().memory.gpu.total, before_total);
    QCOMPARE(window_->inputPanel()->microBatchBox()->value(), 1);

    // A good one sets the micro-batch it names, the panel shows it, and its plan is marked.
    const QString good = dir_.filePath("ds-good.json");
    write_file(good, R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
      "bf16": {"enabled": true}, "zero_optimization": {"stage": 2}})");
    window_->inputPanel()->openDeepSpeedConfig(good);
    QCOMPARE(errors_.size(), 1);
    QCOMPARE(window_->comparison()->training.micro_batch, std::int64_t{4});
    QCOMPARE(window_->inputPanel()->microBatchBox()->value(), 4);
    QVERIFY(window_->comparison()->configured_choice.has_value());
    QCOMPARE(window_->comparison()->configured_choice->stage, 2);
  }

  void runReportsShowMeasuredBesidePredicted() {
    // A report as zeroplan run --report writes it: the plan document plus "measured".
    const Comparison& c = *window_->comparison();
    const PlanResult& plan = c.plans.front();
    nlohmann::json document = plans_document(c.model, c.cluster, c.training, {plan});
    nlohmann::json measured_bytes = nlohmann::json::object();
    for (const auto& [name, bytes] : plan.memory.gpu.components()) measured_bytes[name] = bytes + 1000;
    measured_bytes["total"] = plan.memory.gpu.total + 10000;
    document["measured"] = {{"gpu_bytes", measured_bytes},
                            {"step_seconds", 0.25},
                            {"tokens_per_second", 16384.0},
                            {"loss", {10.9, 9.5, 8.1}}};
    const QString path = dir_.filePath("run.json");
    write_file(path, document.dump(2));
    QVERIFY(window_->openRunReport(path));
    QVERIFY(errors_.isEmpty());
    MeasuredView* view = window_->measuredView();
    QCOMPARE(view->reports().size(), std::size_t{1});
    // The first component is the top bar, the last of the series (Qt draws category 0 at the bottom); the chart's
    // unit is GiB here (the plan's total is above 1 GiB).
    const int first = view->predictedSet()->count() - 1;
    QCOMPARE(view->predictedSet()->at(first), to_gib(plan.memory.gpu.components().front().second));
    QCOMPARE(view->measuredSet()->at(first), to_gib(plan.memory.gpu.components().front().second + 1000));
    QCOMPARE(view->table()->columnCount(), 3);
    QVERIFY(!view->table()->item(0, 2)->text().isEmpty());  // the error of the first component

    // A plan document without measurements is not a run report: said so, nothing added.
    nlohmann::json plan_only = plans_document(c.model, c.cluster, c.training, c.plans);
    const QString not_report = dir_.filePath("plan.json");
    write_file(not_report, plan_only.dump());
    QVERIFY(!window_->openRunReport(not_report));
    QCOMPARE(errors_.size(), 1);
    QVERIFY2(errors_.front().contains("measured"), qPrintable(errors_.front()));
    QCOMPARE(view->reports().size(), std::size_t{1});
  }

  void timelineShowsTheSimulatorsStep() {
    const Comparison& c = *window_->comparison();
    const int stage2 = c.index_of(PlanChoice{2, OffloadDevice::none, OffloadDevice::none});
    QVERIFY(stage2 >= 0);
    window_->selectPlan(stage2);
    SimulationOptions options;
    options.record_events = true;
    const StepSimulation sim = simulate_step(c.model, c.cluster, c.training, c.plans[stage2].choice, options);
    const PlanStep& shown = window_->timeline()->step();
    QCOMPARE(shown.tasks.size(), sim.events.size());
    QCOMPARE(shown.step_seconds, sim.step_seconds);
    Bytes highest = 0;
    for (const auto& [time, bytes] : shown.memory_curve) highest = std::max(highest, bytes);
    QCOMPARE(highest, sim.peak_gpu_bytes);

    // The recommended plan: the most tokens/s among the plans that fit.
    int best = -1;
    double best_rate = 0.0;
    for (std::size_t i = 0; i < c.plans.size(); ++i) {
      if (!c.plans[i].fits) continue;
      try {
        const double rate = simulate_step(c.model, c.cluster, c.training, c.plans[i].choice).tokens_per_second;
        if (rate > best_rate) {
          best_rate = rate;
          best = static_cast<int>(i);
        }
      } catch (const InputError&) {
      }
    }
    QCOMPARE(window_->planModel()->recommendedRow(), best);
  }

  void exportsCsvAndPng() {
    const QString csv = dir_.filePath("plans.csv");
    QVERIFY(window_->exportTableCsv(csv));
    QFile file(csv);
    QVERIFY(file.open(QIODevice::ReadOnly | QIODevice::Text));
    const QStringList lines = QString::fromUtf8(file.readAll()).split('\n', Qt::SkipEmptyParts);
    const auto& plans = window_->comparison()->plans;
    QCOMPARE(lines.size(), static_cast<int>(plans.size()) + 1);
    const int total = lines.front().split(',').indexOf("gpu_total_bytes");
    QVERIFY(total >= 0);
    // A cell with a comma is quoted ("fits, recommended"): split the row as CSV does.
    const auto csv_fields = [](const QString& row) {
      QStringList fields{QString()};
      bool quoted = false;
      for (qsizetype i = 0; i < row.size(); ++i) {
        const QChar c = row[i];
        if (quoted && c == '"' && i + 1 < row.size() && row[i + 1] == '"') {
          fields.back() += c;
          ++i;
        } else if (c == '"') {
          quoted = !quoted;
        } else if (c == ',' && !quoted) {
          fields << QString();
        } else {
          fields.back() += c;
        }
      }
      return fields;
    };
    const QStringList first = csv_fields(lines[1]);
    QCOMPARE(first.size(), lines.front().split(',').size());
    QCOMPARE(first[total].toLongLong(), static_cast<qlonglong>(plans.front().memory.gpu.total));

    const QString png = dir_.filePath("window.png");
    write_screenshot(*window_, QSize(900, 640), png);
    const QImage image(png);
    QCOMPARE(image.size(), QSize(900, 640));
    const QString chart = dir_.filePath("chart.png");
    QVERIFY(window_->exportChartPng(chart));
    QVERIFY(!QImage(chart).isNull());
    QVERIFY(!window_->exportTableCsv("/nonexistent-dir/plans.csv"));
    QCOMPARE(errors_.size(), 1);
  }
};

QTEST_MAIN(MainWindowTest)
#include "main_window_test.moc"
