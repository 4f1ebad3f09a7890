#include "gui/measured_view.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QCursor>
#include <QGraphicsLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QHorizontalBarSeries>
#include <QIcon>
#include <QLabel>
#include <QLegend>
#include <QLineSeries>
#include <QListWidget>
#include <QLocale>
#include <QPainter>
#include <QPen>
#include <QPixmap>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QToolTip>
#include <QVBoxLayout>
#include <QValueAxis>

#include "core/units.h"
#include "gui/component_palette.h"
#include "gui/figure_format.h"
#include "gui/run_detail_view.h"

namespace zeroplan {

namespace {

// No animation, and no frame around the plot: the default frame costs about 40 pixels of each chart's width,
// at small windows better spent on the plot.
void compact(QChart* chart) {
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->setMargins(QMargins(4, 4, 4, 4));
  chart->setBackgroundRoundness(0);
}

void clear_chart(QChart* chart) {
  chart->removeAllSeries();
  for (QAbstractAxis* axis : chart->axes()) {
    chart->removeAxis(axis);
    delete axis;
  }
}

// "gpt2-1.5b (run-a.json)" on two lines, model above file, where a label is narrow (list, table headers): the
// file names that tell two reports apart are then elided, if at all, on their own line.
QString stacked(const std::string& label) {
  QString text = QString::fromStdString(label);
  const qsizetype open = text.indexOf(" (");
  if (open > 0) text.replace(open, 1, '\n');
  return text;
}

// A square of the report's colour for its list entry, so the list reads as the loss chart's legend.
QIcon swatch(const QColor& color) {
  QPixmap pixmap(12, 12);
  pixmap.fill(Qt::white);
  QPainter painter(&pixmap);
  painter.fillRect(1, 1, 10, 10, color);
  painter.end();
  QIcon icon(pixmap);
  icon.addPixmap(pixmap, QIcon::Selected);  // not tinted with the selection colour, which may be the swatch's own
  return icon;
}

}  // namespace

MeasuredView::MeasuredView(QWidget* parent) : QWidget(parent) {
  list_ = new QListWidget(this);
  // Two reports of one model carry their file names, on a second line; the list widens for them (relabel) up to
  // a limit, past which a line is cut in the middle (model name and extension stay); each entry's tooltip has
  // the full path.
  list_->setTextElideMode(Qt::ElideMiddle);
  list_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  // Short button texts: the column stays narrow enough for both charts at 1100 pixels of window width.
  auto* open = new QPushButton(tr("Open…"), this);
  open->setToolTip(tr("Open run reports written by zeroplan run --report (Ctrl+R)"));
  auto* remove = new QPushButton(tr("Remove"), this);
  remove->setToolTip(tr("Remove the selected report"));
  auto* hint = new QLabel(tr("Open the JSON that <tt>zeroplan run --report FILE</tt> writes. Error = (predicted "
                             "- measured) / measured."),
                          this);
  hint->setWordWrap(true);
  auto* side = new QWidget(this);
  side->setMinimumWidth(140);
  auto* side_layout = new QVBoxLayout(side);
  side_layout->setContentsMargins(0, 0, 0, 0);
  side_layout->addWidget(list_, 1);
  auto* buttons = new QHBoxLayout();
  buttons->addWidget(open);
  buttons->addWidget(remove);
  side_layout->addLayout(buttons);
  side_layout->addWidget(hint);

  components_view_ = new QChartView(this);
  loss_view_ = new QChartView(this);
  for (QChartView* view : {components_view_, loss_view_}) {
    view->setRenderHint(QPainter::Antialiasing);
    view->setMinimumSize(200, 150);
    compact(view->chart());
  }
  components_view_->chart()->setTitle(tr("Predicted vs measured GPU memory (open a run report)"));
  loss_view_->chart()->setTitle(tr("Loss per step"));
  // The loss legend sits inside the plot, top right (where the curves have fallen away), one report per line:
  // in a row above the plot, two or three labels had to share a narrow chart's width and were elided alike.
  QLegend* legend = loss_view_->chart()->legend();
  legend->detachFromChart();
  legend->setAlignment(Qt::AlignLeft);  // detached and left-aligned: one marker per line, markers in a column
  legend->setBackgroundVisible(true);
  legend->setBrush(QColor(255, 255, 255, 230));
  legend->setPen(QPen(QColor(0xb0, 0xb0, 0xb0)));
  legend->setShowToolTips(true);  // the full label where it still has to be elided
  legend->setVisible(false);      // until a report has a loss curve
  connect(loss_view_->chart(), &QChart::plotAreaChanged, this, &MeasuredView::placeLossLegend);
  table_ = new QTableWidget(this);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setAlternatingRowColors(true);
  table_->setMinimumHeight(120);

  auto* charts = new QSplitter(Qt::Horizontal, this);
  charts->addWidget(components_view_);
  charts->addWidget(loss_view_);
  charts->setStretchFactor(0, 1);
  charts->setStretchFactor(1, 1);
  charts->setSizes({500, 500});
  // Below the charts: the selected report in detail, and every report's figures side by side.
  detail_ = new RunDetailView(this);
  lower_tabs_ = new QTabWidget(this);
  // In a scroll area: the tables keep their rows' height, and a short window scrolls rather than cuts them.
  auto* detail_scroll = new QScrollArea(this);
  detail_scroll->setWidget(detail_);
  detail_scroll->setWidgetResizable(true);
  detail_scroll->setFrameShape(QFrame::NoFrame);
  detail_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  lower_tabs_->addTab(detail_scroll, tr("Selected run: ranks and communication"));
  lower_tabs_->addTab(table_, tr("All reports"));
  auto* right = new QSplitter(Qt::Vertical, this);
  right->addWidget(charts);
  right->addWidget(lower_tabs_);
  right->setStretchFactor(0, 2);
  right->setStretchFactor(1, 3);
  right->setSizes({400, 600});
  right->setChildrenCollapsible(false);
  auto* main = main_splitter_ = new QSplitter(Qt::Horizontal, this);
  main->addWidget(side);
  main->addWidget(right);
  main->setStretchFactor(0, 1);
  main->setStretchFactor(1, 4);
  main->setSizes({170, 1000});
  main->setChildrenCollapsible(false);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(main);

  connect(open, &QPushButton::clicked, this, &MeasuredView::openRequested);
  connect(remove, &QPushButton::clicked, this, &MeasuredView::removeSelected);
  connect(list_, &QListWidget::currentRowChanged, this, &MeasuredView::showSelected);
  connect(detail_, &RunDetailView::useRunInputsRequested, this, [this] {
    const int row = list_->currentRow();
    if (row >= 0 && row < static_cast<int>(reports_.size())) emit useRunInputsRequested(row);
  });
}

void MeasuredView::setComparison(const Comparison* comparison) {
  comparison_ = comparison;
  showSelected();
}

int MeasuredView::tableRow(const QString& key) const {
  for (int r = 0; r < table_->rowCount(); ++r) {
    if (table_->verticalHeaderItem(r) && table_->verticalHeaderItem(r)->data(Qt::UserRole).toString() == key) return r;
  }
  return -1;
}

QChart* MeasuredView::componentsChart() const { return components_view_->chart(); }
QChart* MeasuredView::lossChart() const { return loss_view_->chart(); }

void MeasuredView::placeLossLegend() {
  QChart* chart = loss_view_->chart();
  QLegend* legend = chart->legend();
  const QRectF plot = chart->plotArea();
  // A detached legend's size hint is that of its largest marker (qtcharts legendlayout.cpp); the column of
  // them is as wide as that and as tall as all of them.
  const QSizeF marker = legend->effectiveSizeHint(Qt::PreferredSize);
  const auto count = static_cast<qreal>(legend->markers().size());
  const qreal width = std::min(marker.width(), std::max(plot.width() - 12.0, 0.0));
  qreal left = 0, top = 0, right = 0, bottom = 0;
  if (legend->layout()) legend->layout()->getContentsMargins(&left, &top, &right, &bottom);
  const qreal rows = (marker.height() - top - bottom) * count + top + bottom;
  const qreal height = std::min(rows, std::max(plot.height() - 12.0, 0.0));
  // Top right, where falling curves have left room, unless the bottom right covers fewer of the curves' points
  // (a short run's loss barely falls, and the legend would hide its last steps).
  const QRectF top_right(plot.right() - width - 6.0, plot.top() + 6.0, width, height);
  const QRectF bottom_right(plot.right() - width - 6.0, plot.bottom() - height - 6.0, width, height);
  // Each point placed in the plot area from the axes' ranges.
  int covered_top = 0, covered_bottom = 0;
  const auto x_axes = chart->axes(Qt::Horizontal);
  const auto y_axes = chart->axes(Qt::Vertical);
  const auto* x = x_axes.isEmpty() ? nullptr : qobject_cast<QValueAxis*>(x_axes.front());
  const auto* y = y_axes.isEmpty() ? nullptr : qobject_cast<QValueAxis*>(y_axes.front());
  for (QAbstractSeries* series : chart->series()) {
    const auto* line = qobject_cast<QLineSeries*>(series);
    if (!line || !x || !y || x->max() <= x->min() || y->max() <= y->min()) continue;
    for (const QPointF& point : line->points()) {
      const QPointF at(plot.left() + (point.x() - x->min()) / (x->max() - x->min()) * plot.width(),
                       plot.bottom() - (point.y() - y->min()) / (y->max() - y->min()) * plot.height());
      covered_top += top_right.contains(at) ? 1 : 0;
      covered_bottom += bottom_right.contains(at) ? 1 : 0;
    }
  }
  legend->setGeometry(covered_bottom < covered_top ? bottom_right : top_right);
  legend->update();
}

void MeasuredView::widenSide() {
  // Before the first layout the splitter has no sizes (and setSizes would only set proportions): wait for it.
  const QList<int> sizes = main_splitter_->sizes();
  if (wanted_side_width_ == 0 || sizes.size() != 2 || sizes[0] + sizes[1] <= wanted_side_width_) return;
  if (sizes[0] < wanted_side_width_) {
    main_splitter_->setSizes({wanted_side_width_, sizes[0] + sizes[1] - wanted_side_width_});
  }
  wanted_side_width_ = 0;
}

void MeasuredView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  widenSide();
}

void MeasuredView::relabel() {
  // A new report can change an earlier one's label (a second report of the same model adds the file names).
  labels_ = report_labels(reports_);
  // Wide enough for the longest line, up to 240 pixels (then elided in the middle; the tooltip has it all).
  // Only ever widened here, so a width the user dragged to stays when it is enough.
  int widest = 0;
  for (const std::string& label : labels_) {
    for (const QString& line : stacked(label).split('\n')) {
      widest = std::max(widest, list_->fontMetrics().horizontalAdvance(line));
    }
  }
  wanted_side_width_ = std::clamp(widest + 48, 140, 240);  // icon, margins, frame and a vertical scroll bar
  widenSide();
  for (int row = 0; row < list_->count(); ++row) {
    const RunReport& report = reports_[static_cast<std::size_t>(row)];
    QListWidgetItem* item = list_->item(row);
    item->setText(stacked(labels_[static_cast<std::size_t>(row)]));
    item->setIcon(swatch(report_color(static_cast<std::size_t>(row))));
    item->setToolTip(tr("%1\n%2 of %3").arg(QString::fromStdString(report.source),
                                           QString::fromStdString(report.plan_label),
                                           QString::fromStdString(report.model_name)));
  }
}

void MeasuredView::addReport(const RunReport& report) {
  reports_.push_back(report);
  list_->addItem(QString());
  relabel();
  rebuildTable();
  rebuildLoss();
  list_->setCurrentRow(list_->count() - 1);
  showSelected();
}

void MeasuredView::removeSelected() {
  const int row = list_->currentRow();
  if (row < 0 || row >= static_cast<int>(reports_.size())) return;
  reports_.erase(reports_.begin() + row);
  delete list_->takeItem(row);
  relabel();
  rebuildTable();
  rebuildLoss();
  showSelected();
}

void MeasuredView::showSelected() {
  // A new chart for each report: on a chart cleared of its axes and series, Qt 6.4 kept drawing the previous
  // report's axis labels under the new ones (seen in an offscreen screenshot after changing the selection).
  auto* chart = new QChart();
  compact(chart);
  QChart* previous = components_view_->chart();
  components_view_->setChart(chart);
  delete previous;  // setChart releases the previous chart without deleting it
  predicted_set_ = nullptr;
  measured_sets_.clear();
  const int row = list_->currentRow();
  if (row < 0 || row >= static_cast<int>(reports_.size())) {
    chart->setTitle(tr("Predicted vs measured GPU memory (open a run report)"));
    selected_match_ = ReportPlanMatch{};
    detail_->setReport(nullptr, {}, selected_match_);
    return;
  }
  const RunReport& report = reports_[static_cast<std::size_t>(row)];
  selected_match_ = match_report_to_plan(report, comparison_);
  detail_->setReport(&report, labels_[static_cast<std::size_t>(row)], selected_match_);

  // The measured side: the report's one measurement, or per component the lowest and the highest rank (the
  // per-rank table has every rank). A rank's total is its device view, else its allocator peak.
  auto rank_bytes = [](const RankMeasurement& rank, const std::string& name) -> std::optional<Bytes> {
    if (name == "total") return rank.device_used_peak_bytes > 0 ? rank.device_used_peak_bytes : rank.allocator_peak_bytes;
    return rank.bytes(name);
  };
  auto extreme = [&](const std::string& name, bool highest) {
    std::optional<Bytes> out;
    for (const RankMeasurement& rank : report.ranks) {
      const std::optional<Bytes> bytes = rank_bytes(rank, name);
      if (bytes && (!out || (highest ? *bytes > *out : *bytes < *out))) out = bytes;
    }
    return out;
  };
  QStringList side_names;
  if (report.ranks.size() > 1) side_names << tr("lowest rank") << tr("highest rank");
  else side_names << tr("measured");
  auto measured_of = [&](const std::string& name) {
    std::vector<std::optional<Bytes>> out;
    if (report.ranks.size() > 1) out = {extreme(name, false), extreme(name, true)};
    else if (report.ranks.size() == 1) out = {rank_bytes(report.ranks.front(), name)};
    else out = {report.measured(name)};
    return out;
  };

  // Only what both sides account for and not 0 on both; the total only against a device view (an allocator's
  // peak has no CUDA context, which the plan's total counts: the tables show both). One unit for the chart,
  // from its largest figure.
  const bool device_view =
      std::any_of(report.ranks.begin(), report.ranks.end(), [](const RankMeasurement& rank) {
        return rank.device_used_peak_bytes > 0;
      }) || (report.ranks.empty() && report.measured_total_basis != "allocator peak");
  struct Bars {
    std::string name;
    Bytes predicted = 0;
    std::vector<Bytes> measured;  // one per side
  };
  std::vector<Bars> bars;
  Bytes largest = 0;
  for (const auto& [name, predicted] : report.predicted_gpu_bytes) {
    const std::vector<std::optional<Bytes>> measured = measured_of(name);
    if (!measured.front() || (name == "total" && !device_view)) continue;
    Bars entry{name, predicted, {}};
    for (const std::optional<Bytes>& bytes : measured) entry.measured.push_back(bytes.value_or(0));
    const Bytes row_largest = std::max(predicted, *std::max_element(entry.measured.begin(), entry.measured.end()));
    if (row_largest == 0) continue;
    largest = std::max(largest, row_largest);
    bars.push_back(std::move(entry));
  }
  const MemoryUnit unit = memory_unit_for(largest);
  predicted_set_ = new QBarSet(tr("predicted"));
  predicted_set_->setColor(QColor(0x9e, 0xb9, 0xd4));
  for (qsizetype i = 0; i < side_names.size(); ++i) {
    measured_sets_.push_back(new QBarSet(side_names[i]));
    // The highest (or only) measurement darkest; the lowest rank between it and the prediction.
    const bool lowest = side_names.size() > 1 && i == 0;
    measured_sets_.back()->setColor(lowest ? QColor(0x4f, 0x81, 0xbd) : QColor(0x1f, 0x4e, 0x79));
  }
  // Qt draws category 0 at the bottom (QBarCategoryAxis::setReverse does not turn a horizontal bar series round
  // in Qt 6.4): appended last to first, the components read top-down in the table's order, total last.
  std::reverse(bars.begin(), bars.end());
  QStringList categories;
  for (const Bars& entry : bars) {
    categories << component_short_name(entry.name);
    predicted_set_->append(static_cast<double>(entry.predicted) / unit.bytes);
    for (std::size_t i = 0; i < entry.measured.size(); ++i) {
      measured_sets_[i]->append(static_cast<double>(entry.measured[i]) / unit.bytes);
    }
  }
  // Horizontal bars: the component names sit level at the left, each as wide as it needs, so none is cut at any
  // window width (under vertical bars they had one bar pair's width and were elided to "para...", "mast...").
  auto* series = new QHorizontalBarSeries();
  series->append(predicted_set_);
  for (QBarSet* set : measured_sets_) series->append(set);
  chart->addSeries(series);
  auto* components = new QBarCategoryAxis();
  components->append(categories);
  chart->addAxis(components, Qt::AlignLeft);
  auto* axis = new QValueAxis();
  axis->setTitleText(report.backend == "cpu" ? tr("%1 per rank (host memory)").arg(unit.name)
                                             : tr("%1 per GPU").arg(unit.name));
  axis->setRange(0.0, std::max(static_cast<double>(largest) / unit.bytes, 1e-3) * 1.1);
  axis->applyNiceNumbers();
  axis->setLabelFormat("%.3g");  // "10", not "10.0": the ticks fit a narrow chart
  chart->addAxis(axis, Qt::AlignBottom);
  series->attachAxis(components);
  series->attachAxis(axis);
  // Hovering a bar names the component in full, with every figure.
  connect(series, &QHorizontalBarSeries::hovered, this, [bars, side_names](bool status, int index, QBarSet*) {
    if (!status || index < 0 || index >= static_cast<int>(bars.size())) {
      QToolTip::hideText();
      return;
    }
    const Bars& entry = bars[static_cast<std::size_t>(index)];
    QString text = tr("%1: %2 predicted").arg(component_display_name(entry.name),
                                             QString::fromStdString(format_bytes(entry.predicted)));
    for (std::size_t i = 0; i < entry.measured.size(); ++i) {
      text += tr(", %1 %2").arg(QString::fromStdString(format_bytes(entry.measured[i])),
                                side_names[static_cast<qsizetype>(i)]);
    }
    QToolTip::showText(QCursor::pos(), text);
  });
  // The label on its own line: with a file name in it, it would push the stage and the step times out of view.
  QString title = QString::fromStdString(labels_[static_cast<std::size_t>(row)]).toHtmlEscaped();
  QString details = tr("%1 on %2, memory")
                        .arg(QString::fromStdString(report.plan_label).toHtmlEscaped(),
                             report.world_size == 1 ? tr("1 rank") : tr("%1 ranks").arg(report.world_size));
  if (report.predicted_step_seconds && report.measured_step_seconds) {
    details += tr("; step %1 predicted, %2 measured")
                   .arg(QString::fromStdString(format_seconds(*report.predicted_step_seconds)),
                        QString::fromStdString(format_seconds(*report.measured_step_seconds)));
  }
  title += "<br><small>" + details + "</small>";
  chart->setTitle(title);
}

void MeasuredView::rebuildTable() {
  // Rows: every component any report has, then total, step time and tokens/s; three columns per report.
  // A component no report measures and every report predicts as 0 (buffers of stages and offloads the runs did
  // not use) says nothing and would push step time and tokens/s out of view: left out.
  QStringList rows;
  for (const RunReport& report : reports_) {
    for (const auto* side : {&report.predicted_gpu_bytes, &report.measured_gpu_bytes}) {
      for (const auto& [name, bytes] : *side) {
        if (name == "total" || rows.contains(QString::fromStdString(name))) continue;
        const bool says_something = std::any_of(reports_.begin(), reports_.end(), [&](const RunReport& any) {
          return any.measured(name).has_value() || any.predicted(name).value_or(0) != 0;
        });
        if (says_something) rows << QString::fromStdString(name);
      }
    }
  }
  rows << "total" << "step_seconds" << "tokens_per_second";
  // Per memory row one unit, from the row's largest figure over every report, named in the row's header.
  auto unit_of = [this](const std::string& row) {
    Bytes largest = 0;
    for (const RunReport& report : reports_) {
      largest = std::max({largest, report.predicted(row).value_or(0), report.measured(row).value_or(0)});
    }
    return memory_unit_for(largest);
  };
  table_->clear();
  table_->setRowCount(static_cast<int>(rows.size()));
  table_->setColumnCount(static_cast<int>(reports_.size() * 3));
  QStringList headers;
  for (const std::string& label : labels_) {
    const QString name = stacked(label);
    headers << tr("%1\npredicted").arg(name) << tr("%1\nmeasured").arg(name) << tr("%1\nerror").arg(name);
  }
  // Rank 0's figures for a report of several ranks (measured.gpu_bytes; the detail tab has every rank).
  for (std::size_t k = 0; k < reports_.size(); ++k) {
    if (reports_[k].world_size > 1) headers[static_cast<int>(3 * k + 1)] += tr(", rank 0");
  }
  table_->setHorizontalHeaderLabels(headers);
  for (int r = 0; r < static_cast<int>(rows.size()); ++r) {
    const QString& row = rows[r];
    QString header;
    if (row == "step_seconds") header = tr("step time (ms)");
    else if (row == "tokens_per_second") header = tr("tokens/s");
    else header = component_display_name(row.toStdString()) + " (" + unit_of(row.toStdString()).name + ")";
    auto* item = new QTableWidgetItem(header);
    item->setData(Qt::UserRole, row);
    table_->setVerticalHeaderItem(r, item);
  }
  auto cell = [this](int r, int c, const QString& text, const QString& tip = QString(), const QVariant& value = {}) {
    auto* item = new QTableWidgetItem(text);
    item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    if (!tip.isEmpty()) item->setToolTip(tip);
    if (value.isValid()) item->setData(Qt::UserRole, value);
    table_->setItem(r, c, item);
  };
  const QLocale english(QLocale::English);

  for (std::size_t k = 0; k < reports_.size(); ++k) {
    const RunReport& report = reports_[k];
    const int c = static_cast<int>(k * 3);
    for (int r = 0; r < static_cast<int>(rows.size()); ++r) {
      const std::string key = rows[r].toStdString();
      std::optional<double> predicted, measured;
      QVariant p_exact, m_exact;  // bytes as integers, seconds and tokens/s as the report's doubles
      QString p_text, m_text;
      if (key == "step_seconds") {
        predicted = report.predicted_step_seconds;
        measured = report.measured_step_seconds;
        if (predicted) p_text = milliseconds_text(*predicted), p_exact = *predicted;
        if (measured) m_text = milliseconds_text(*measured), m_exact = *measured;
      } else if (key == "tokens_per_second") {
        predicted = report.predicted_tokens_per_second;
        measured = report.measured_tokens_per_second;
        if (predicted) p_text = english.toString(*predicted, 'f', 0), p_exact = *predicted;
        if (measured) m_text = english.toString(*measured, 'f', 0), m_exact = *measured;
      } else {
        const MemoryUnit unit = unit_of(key);
        if (auto b = report.predicted(key)) {
          predicted = static_cast<double>(*b);
          p_exact = static_cast<qlonglong>(*b);
          p_text = memory_text(*b, unit);
        }
        if (auto b = report.measured(key)) {
          measured = static_cast<double>(*b);
          m_exact = static_cast<qlonglong>(*b);
          m_text = memory_text(*b, unit);
        }
      }
      const bool bytes_row = key != "step_seconds" && key != "tokens_per_second";
      cell(r, c, p_text.isEmpty() ? tr("not predicted") : p_text,
           bytes_row && p_exact.isValid() ? english.toString(p_exact.toLongLong()) + " bytes" : QString(), p_exact);
      QString measured_tip = bytes_row && m_exact.isValid() ? english.toString(m_exact.toLongLong()) + " bytes" : QString();
      if (key == "total") measured_tip += " (" + QString::fromStdString(report.measured_total_basis) + ")";
      cell(r, c + 1, m_text.isEmpty() ? tr("not measured") : m_text, measured_tip, m_exact);
      cell(r, c + 2, predicted && measured ? error_text(*predicted, *measured) : QString());
    }
  }
  table_->resizeColumnsToContents();
  table_->resizeRowsToContents();  // the style's default row height shows fewer rows than fit
}

void MeasuredView::rebuildLoss() {
  QChart* chart = loss_view_->chart();
  clear_chart(chart);
  double largest = 0.0;
  std::size_t steps = 1;
  std::vector<QLineSeries*> all;
  for (std::size_t k = 0; k < reports_.size(); ++k) {
    const RunReport& report = reports_[k];
    if (report.loss.empty()) continue;
    auto* series = new QLineSeries();
    series->setName(QString::fromStdString(labels_[k]));
    // The report's own colour (its list swatch); a short run (the 1.5B report has 20 steps beside 300) also
    // shows its points so it is not lost at the left edge.
    QPen pen(report_color(k));
    pen.setWidthF(2.0);
    series->setPen(pen);
    series->setPointsVisible(report.loss.size() <= 50);
    series->setMarkerSize(4.0);
    for (std::size_t i = 0; i < report.loss.size(); ++i) {
      series->append(static_cast<double>(i + 1), report.loss[i]);
      if (std::isfinite(report.loss[i])) largest = std::max(largest, report.loss[i]);
    }
    steps = std::max(steps, report.loss.size());
    chart->addSeries(series);
    all.push_back(series);
  }
  chart->legend()->setVisible(!all.empty());  // detached, it would otherwise draw an empty box
  if (all.empty()) return;
  auto* x = new QValueAxis();
  x->setTitleText(tr("step"));
  x->setRange(0.0, static_cast<double>(steps));
  x->applyNiceNumbers();  // 0, 50, ..., 300 rather than 1, 76, 151, ...
  x->setLabelFormat("%.0f");
  chart->addAxis(x, Qt::AlignBottom);
  auto* y = new QValueAxis();
  y->setTitleText(tr("loss (nats)"));
  y->setRange(0.0, std::max(largest, 1e-3) * 1.05);
  y->applyNiceNumbers();
  chart->addAxis(y, Qt::AlignLeft);
  for (QLineSeries* series : all) {
    series->attachAxis(x);
    series->attachAxis(y);
  }
  placeLossLegend();
}

}  // namespace zeroplan
