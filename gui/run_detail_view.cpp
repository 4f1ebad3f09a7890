#include "gui/run_detail_view.h"

#include <algorithm>
#include <optional>

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QScrollBar>
#include <QTableWidget>
#include <QVBoxLayout>

#include "gui/component_palette.h"
#include "gui/figure_format.h"

namespace zeroplan {

namespace {

// At most this many input differences in the summary; the tooltip lists them all.
constexpr std::size_t kDifferencesShown = 4;

QTableWidget* make_table(QWidget* parent) {
  auto* table = new QTableWidget(parent);
  table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table->setAlternatingRowColors(true);
  table->setWordWrap(false);
  table->horizontalHeader()->setDefaultAlignment(Qt::AlignCenter);
  table->verticalHeader()->setDefaultSectionSize(table->fontMetrics().height() + 6);
  table->setMinimumWidth(200);
  return table;
}

void set_row_header(QTableWidget* table, int row, const QString& text, const QString& key, const QString& tip = {}) {
  auto* item = new QTableWidgetItem(text);
  item->setData(Qt::UserRole, key);
  if (!tip.isEmpty()) item->setToolTip(tip);
  table->setVerticalHeaderItem(row, item);
}

void set_cell(QTableWidget* table, int row, int column, const QString& text, const QString& tip = {},
              const QVariant& exact = {}) {
  auto* item = new QTableWidgetItem(text);
  item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  if (!tip.isEmpty()) item->setToolTip(tip);
  if (exact.isValid()) item->setData(Qt::UserRole, exact);
  table->setItem(row, column, item);
}

// A table no taller than its rows (and a horizontal scroll bar when the columns do not fit), so the two tables
// stand one under the other without empty space between them.
void fit_height(QTableWidget* table) {
  table->resizeColumnsToContents();
  const int rows = table->verticalHeader()->length();
  const int height = table->horizontalHeader()->sizeHint().height() + rows + 2 * table->frameWidth();
  const bool scrolls = table->horizontalHeader()->length() + table->verticalHeader()->sizeHint().width() +
                           2 * table->frameWidth() > table->width();
  table->setMinimumHeight(0);
  table->setFixedHeight(height + (scrolls ? table->horizontalScrollBar()->sizeHint().height() : 0));
}

int row_of(const QTableWidget* table, const QString& key) {
  for (int r = 0; r < table->rowCount(); ++r) {
    const QTableWidgetItem* item = table->verticalHeaderItem(r);
    if (item && item->data(Qt::UserRole).toString() == key) return r;
  }
  return -1;
}

QString collective_name(const std::string& kind) {
  QString name = QString::fromStdString(kind);
  return name.replace('_', '-');  // "all-reduce", as NCCL's documentation writes them
}

QString ranks_text(int ranks) {
  return ranks == 1 ? QObject::tr("1 rank") : QObject::tr("%1 ranks").arg(ranks);
}

// The measured total of one rank: the device's own view where it has one (cudaMemGetInfo: context and
// libraries included), else the allocator's peak (CPU backend), as zeroplan run compares its total.
Bytes rank_total(const RankMeasurement& rank) {
  return rank.device_used_peak_bytes > 0 ? rank.device_used_peak_bytes : rank.allocator_peak_bytes;
}

// Spread of figures over ranks: "max - min" and its share of the largest.
QString spread_text(const QString& difference, double max_minus_min, double largest) {
  if (max_minus_min == 0.0) return QObject::tr("none");
  return QString("%1 (%2%)").arg(difference).arg(largest > 0.0 ? max_minus_min / largest * 100.0 : 0.0, 0, 'f', 1);
}

}  // namespace

RunDetailView::RunDetailView(QWidget* parent) : QWidget(parent) {
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  summary_->setTextFormat(Qt::RichText);
  summary_->setTextInteractionFlags(Qt::TextBrowserInteraction);
  summary_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  summary_->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Maximum);
  ranks_table_ = make_table(this);
  comm_table_ = make_table(this);
  ranks_table_->setToolTip(tr("Each rank's allocator peak per component (the device view for the total) beside the "
                              "plan's figure per GPU; the last column is the spread across ranks (max - min)"));
  comm_table_->setToolTip(tr("Bytes of the full buffer per collective per step and GPU (nccl-tests' convention), "
                             "counted where each collective is issued, beside the plan's communication model; busy "
                             "seconds per kind beside the simulator's for the matched plan"));

  // One above the other: side by side, neither had the width for its columns at the default window size.
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(summary_);
  layout->addWidget(ranks_table_);
  layout->addWidget(comm_table_);
  layout->addStretch(1);
  connect(summary_, &QLabel::linkActivated, this, [this](const QString&) { emit useRunInputsRequested(); });
  setReport(nullptr, {}, {});
}

void RunDetailView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  fit_height(ranks_table_);
  fit_height(comm_table_);
}

int RunDetailView::ranksRow(const QString& key) const { return row_of(ranks_table_, key); }
int RunDetailView::commRow(const QString& key) const { return row_of(comm_table_, key); }

void RunDetailView::setReport(const RunReport* report, const std::string& label, const ReportPlanMatch& match) {
  ranks_table_->clear();
  ranks_table_->setRowCount(0);
  ranks_table_->setColumnCount(0);
  comm_table_->clear();
  comm_table_->setRowCount(0);
  comm_table_->setColumnCount(0);
  if (!report) {
    summary_->setText(tr("Open a run report to see every rank's memory and the communication per collective."));
    return;
  }
  showSummary(*report, label, match);
  fillRanks(*report);
  fillComm(*report, match);
}

void RunDetailView::showSummary(const RunReport& report, const std::string& label, const ReportPlanMatch& match) {
  QStringList lines;
  lines << tr("<b>%1</b>: %2 on %3, %4 backend, %5")
               .arg(QString::fromStdString(label).toHtmlEscaped(), QString::fromStdString(report.plan_label),
                    ranks_text(report.world_size), QString::fromStdString(report.backend).toHtmlEscaped(),
                    QString::fromStdString(report.precision));
  if (!report.format_note.empty()) lines << QString::fromStdString(report.format_note).toHtmlEscaped();
  if (report.backend == "cpu") {
    // run/training_run.cpp says the same under its tables: the CPU reference is a different program.
    QString note = tr("The CPU backend keeps every tensor in fp32 in host memory: its memory is listed beside the "
                      "GPU plan, not judged by it.");
    if (report.precision != "fp32") {
      note += tr(" It moves fp32 elements where the plan counts %1 ones, so the bytes differ by design.")
                  .arg(QString::fromStdString(report.precision));
    }
    lines << note;
  }
  if (report.measured_host_node_bytes) {
    // The node's host memory at its peak beside the plan's host column (run/training_run.cpp prints the same).
    QString line = tr("Host memory of the node at its peak: %1 measured (MemAvailable at launch less its lowest)")
                       .arg(QString::fromStdString(format_bytes(*report.measured_host_node_bytes)));
    if (report.predicted_host_node_bytes && *report.predicted_host_node_bytes > 0) {
      const double error = static_cast<double>(*report.predicted_host_node_bytes) /
                               static_cast<double>(*report.measured_host_node_bytes) - 1.0;
      line += tr(", %1 planned (%2%3%)")
                  .arg(QString::fromStdString(format_bytes(*report.predicted_host_node_bytes)))
                  .arg(error >= 0 ? "+" : "")
                  .arg(100.0 * error, 0, 'f', 1);
    }
    lines << line.toHtmlEscaped();
  }
  QString tip;
  if (match.matched()) {
    lines << tr("Simulator: the GUI's plan <b>%1</b> for %2 GPUs, the run's inputs.")
                 .arg(QString::fromStdString(match.plan_label))
                 .arg(report.world_size);
    if (!match.problem.empty()) {
      lines << tr("<span style='color:#b00000'>The simulator cannot time it: %1</span>")
                   .arg(QString::fromStdString(match.problem).toHtmlEscaped());
    }
    if (!match.step_disagreement.empty()) {
      lines << tr("<span style='color:#b00000'>%1</span>")
                   .arg(QString::fromStdString(match.step_disagreement).toHtmlEscaped());
    }
  } else {
    QStringList shown;
    for (std::size_t i = 0; i < match.differences.size() && i < kDifferencesShown; ++i) {
      shown << QString::fromStdString(match.differences[i]).toHtmlEscaped();
    }
    if (match.differences.size() > kDifferencesShown) {
      shown << tr("%1 more (hover)").arg(match.differences.size() - kDifferencesShown);
    }
    lines << tr("<span style='color:#b00000'>No simulator figures: the GUI's inputs are not this run's (%1).</span> "
                "<a href='use-run-inputs'>Use the run's inputs</a>")
                 .arg(shown.join("; "));
    for (const std::string& difference : match.differences) tip += QString::fromStdString(difference) + "\n";
  }
  summary_->setText(lines.join("<br>"));
  summary_->setToolTip(tip.trimmed());
}

void RunDetailView::fillRanks(const RunReport& report) {
  const int ranks = static_cast<int>(report.ranks.size());
  // Components: every one with a figure other than 0 on either side (a buffer of another stage, 0 predicted
  // and 0 measured, says nothing), the plan's order first.
  std::vector<std::string> components;
  auto add = [&](const std::string& name) {
    const bool nonzero = report.predicted(name).value_or(0) != 0 ||
                         std::any_of(report.ranks.begin(), report.ranks.end(),
                                     [&](const RankMeasurement& rank) { return rank.bytes(name).value_or(0) != 0; });
    if (name != "total" && nonzero && std::find(components.begin(), components.end(), name) == components.end()) {
      components.push_back(name);
    }
  };
  for (const auto& [name, bytes] : report.predicted_gpu_bytes) add(name);
  for (const RankMeasurement& rank : report.ranks) {
    for (const auto& [name, bytes] : rank.gpu_bytes) add(name);
  }
  const bool device_view = std::any_of(report.ranks.begin(), report.ranks.end(),
                                       [](const RankMeasurement& rank) { return rank.device_used_peak_bytes > 0; });

  QStringList headers;
  headers << tr("predicted\n(plan, per GPU)");
  for (int r = 0; r < ranks; ++r) headers << tr("rank %1").arg(r);
  if (ranks > 0) headers << tr("spread\n(max − min)");
  const int rows = static_cast<int>(components.size()) + 2 + (device_view ? 1 : 0);
  ranks_table_->setColumnCount(static_cast<int>(headers.size()));
  ranks_table_->setRowCount(rows);
  ranks_table_->setHorizontalHeaderLabels(headers);

  // One row of memory figures: the plan's, each rank's, the spread, in the unit of the row's largest figure
  // (a CPU run's kilobytes beside a GPU plan's gigabyte of CUDA context would all read 0.000 in one unit).
  auto memory_row = [&](int row, const std::optional<Bytes>& predicted, auto measured_of, const QString& name,
                        const QString& key, const QString& tip) {
    Bytes largest = predicted.value_or(0);
    for (const RankMeasurement& rank : report.ranks) largest = std::max(largest, measured_of(rank).value_or(0));
    const MemoryUnit unit = memory_unit_for(largest);
    set_row_header(ranks_table_, row, name + " (" + unit.name + ")", key, tip);
    set_cell(ranks_table_, row, 0, predicted ? memory_text(*predicted, unit) : tr("not predicted"),
             predicted ? bytes_text(*predicted) + tr(" bytes") : QString(),
             predicted ? QVariant(static_cast<qlonglong>(*predicted)) : QVariant());
    std::optional<Bytes> low, high;
    for (int r = 0; r < ranks; ++r) {
      const std::optional<Bytes> bytes = measured_of(report.ranks[static_cast<std::size_t>(r)]);
      if (!bytes) {
        set_cell(ranks_table_, row, 1 + r, tr("not measured"));
        continue;
      }
      QString tip = bytes_text(*bytes) + tr(" bytes");
      if (predicted) tip += tr("; predicted - measured: %1").arg(error_text(*predicted, *bytes));
      set_cell(ranks_table_, row, 1 + r, memory_text(*bytes, unit), tip, static_cast<qlonglong>(*bytes));
      low = low ? std::min(*low, *bytes) : *bytes;
      high = high ? std::max(*high, *bytes) : *bytes;
    }
    if (ranks == 0) return;
    if (!low) {
      set_cell(ranks_table_, row, 1 + ranks, QString());
      return;
    }
    const Bytes spread = *high - *low;
    set_cell(ranks_table_, row, 1 + ranks,
             spread_text(memory_text(spread, unit), static_cast<double>(spread), static_cast<double>(*high)),
             bytes_text(spread) + tr(" bytes between the lowest and the highest rank"), static_cast<qlonglong>(spread));
  };

  int row = 0;
  for (const std::string& name : components) {
    QString tip;
    if (name == "runtime_overhead") tip = tr("The ranks record it as their workspace and, on a GPU, the device view's "
                                             "total beyond the allocator's peak");
    memory_row(row++, report.predicted(name), [&](const RankMeasurement& rank) { return rank.bytes(name); },
               component_display_name(name), QString::fromStdString(name), tip);
  }
  memory_row(row++, report.predicted("total"),
             [](const RankMeasurement& rank) { return std::optional<Bytes>(rank_total(rank)); },
             report.ranks.empty() ? tr("total") : device_view ? tr("total, device view") : tr("total, allocator peak"),
             "total",
             report.ranks.empty() ? QString()
             : device_view        ? tr("cudaMemGetInfo's used bytes at their peak: context and libraries included")
                                  : tr("The allocator's peak: no device view on this backend"));
  if (device_view) {
    memory_row(row++, std::nullopt,
               [](const RankMeasurement& rank) { return std::optional<Bytes>(rank.allocator_peak_bytes); },
               tr("allocator peak"), "allocator_peak", QString());
  }

  // Step time: the simulator's (recorded by the run) beside each rank's median.
  set_row_header(ranks_table_, row, tr("step time (ms)"), "step_seconds");
  const std::optional<double> predicted_step = report.predicted_step_seconds;
  set_cell(ranks_table_, row, 0, predicted_step ? milliseconds_text(*predicted_step) : tr("not predicted"),
           predicted_step ? tr("the simulator's step for the run's plan") : QString(),
           predicted_step ? QVariant(*predicted_step) : QVariant());
  double low = 0.0, high = 0.0;
  for (int r = 0; r < ranks; ++r) {
    const double seconds = report.ranks[static_cast<std::size_t>(r)].step_seconds;
    set_cell(ranks_table_, row, 1 + r, milliseconds_text(seconds),
             predicted_step ? tr("predicted - measured: %1").arg(error_text(*predicted_step, seconds)) : QString(),
             seconds);
    low = r == 0 ? seconds : std::min(low, seconds);
    high = r == 0 ? seconds : std::max(high, seconds);
  }
  if (ranks > 0) {
    set_cell(ranks_table_, row, 1 + ranks, spread_text(milliseconds_text(high - low), high - low, high),
             tr("between the fastest and the slowest rank (ms)"), high - low);
  }
  fit_height(ranks_table_);
}

void RunDetailView::fillComm(const RunReport& report, const ReportPlanMatch& match) {
  const QStringList headers = {tr("plan\n(bytes/step)"),    tr("measured\n(bytes/step)"), tr("measured − plan\n(bytes)"),
                               tr("across ranks\n(max − min)"), tr("simulator\n(ms/step)"),   tr("measured\n(ms/step)")};
  comm_table_->setColumnCount(comm_columns);
  comm_table_->setRowCount(static_cast<int>(collective_kinds().size()) + 1);
  comm_table_->setHorizontalHeaderLabels(headers);
  const bool recorded = !report.ranks.empty();  // older one-rank reports measured no communication
  const QString no_simulation = match.matched() ? tr("not simulated") : tr("no plan");
  const QString no_simulation_tip =
      match.matched() ? QString::fromStdString(match.problem) : tr("The GUI's inputs are not the run's (see above)");

  int row = 0;
  for (const std::string& kind : collective_kinds()) {
    set_row_header(comm_table_, row, collective_name(kind), QString::fromStdString(kind));
    const std::optional<Bytes> plan = report.predicted_comm(kind);
    const std::optional<Bytes> measured = report.measured_comm(kind);
    set_cell(comm_table_, row, plan_bytes, plan ? bytes_text(*plan) : tr("not predicted"), {},
             plan ? QVariant(static_cast<qlonglong>(*plan)) : QVariant());
    set_cell(comm_table_, row, measured_bytes, measured ? bytes_text(*measured) : tr("not measured"), {},
             measured ? QVariant(static_cast<qlonglong>(*measured)) : QVariant());
    if (plan && measured) {
      const Bytes difference = *measured - *plan;
      const QString text = difference == 0 ? tr("equal")
                                           : QString("%1%2").arg(difference > 0 ? "+" : "").arg(bytes_text(difference));
      set_cell(comm_table_, row, bytes_difference, text,
               difference == 0 ? QString() : tr("predicted - measured: %1").arg(error_text(*plan, *measured)),
               static_cast<qlonglong>(difference));
    } else {
      set_cell(comm_table_, row, bytes_difference, QString());
    }
    // The ranks' own counts: in stages 0-2 every rank sends the same bytes.
    std::optional<Bytes> low, high;
    for (const RankMeasurement& rank : report.ranks) {
      if (const std::optional<Bytes> bytes = rank.comm_bytes(kind)) {
        low = low ? std::min(*low, *bytes) : *bytes;
        high = high ? std::max(*high, *bytes) : *bytes;
      }
    }
    if (low) {
      const Bytes spread = *high - *low;
      set_cell(comm_table_, row, rank_spread,
               spread == 0 ? tr("equal on %1").arg(ranks_text(static_cast<int>(report.ranks.size())))
                           : bytes_text(spread),
               {}, static_cast<qlonglong>(spread));
    } else {
      set_cell(comm_table_, row, rank_spread, recorded ? tr("not measured") : QString());
    }
    const std::optional<double> simulated = match.simulated_seconds(kind);
    set_cell(comm_table_, row, simulated_ms, simulated ? milliseconds_text(*simulated) : no_simulation,
             simulated ? QString() : no_simulation_tip, simulated ? QVariant(*simulated) : QVariant());
    const std::optional<double> seconds = report.measured_comm_time(kind);
    set_cell(comm_table_, row, measured_ms, seconds ? milliseconds_text(*seconds) : tr("not measured"), {},
             seconds ? QVariant(*seconds) : QVariant());
    ++row;
  }
  set_row_header(comm_table_, row, tr("exposed communication"), "exposed",
                 tr("The communication stream busy while compute waits (median per step)"));
  for (int column : {plan_bytes, measured_bytes, bytes_difference, rank_spread}) set_cell(comm_table_, row, column, {});
  const std::optional<double> simulated =
      match.simulated ? std::optional<double>(match.simulated->exposed_comm_seconds) : std::nullopt;
  set_cell(comm_table_, row, simulated_ms, simulated ? milliseconds_text(*simulated) : no_simulation,
           simulated ? QString() : no_simulation_tip, simulated ? QVariant(*simulated) : QVariant());
  const std::optional<double> exposed = report.measured_exposed_comm_seconds;
  set_cell(comm_table_, row, measured_ms, exposed ? milliseconds_text(*exposed) : tr("not measured"), {},
           exposed ? QVariant(*exposed) : QVariant());
  fit_height(comm_table_);
}

}  // namespace zeroplan
