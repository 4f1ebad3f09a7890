#include "gui/measured_view.h"

#include <algorithm>
#include <cmath>

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineSeries>
#include <QListWidget>
#include <QLocale>
#include <QPushButton>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QValueAxis>

#include "core/units.h"
#include "gui/component_palette.h"

namespace zeroplan {

namespace {

void clear_chart(QChart* chart) {
  chart->removeAllSeries();
  for (QAbstractAxis* axis : chart->axes()) {
    chart->removeAxis(axis);
    delete axis;
  }
}

// Error of a prediction relative to the measurement: (predicted - measured) / measured.
QString error_text(double predicted, double measured) {
  if (measured == 0.0) return predicted == 0.0 ? QStringLiteral("0.0%") : QStringLiteral("n/a (measured 0)");
  return QString("%1%2%").arg(predicted >= measured ? "+" : "").arg((predicted - measured) / measured * 100.0, 0, 'f', 1);
}

}  // namespace

MeasuredView::MeasuredView(QWidget* parent) : QWidget(parent) {
  list_ = new QListWidget(this);
  list_->setToolTip(tr("Run reports written by zeroplan run --report"));
  auto* open = new QPushButton(tr("Open run report…"), this);
  auto* remove = new QPushButton(tr("Remove"), this);
  auto* hint = new QLabel(tr("Open the JSON that <tt>zeroplan run --report FILE</tt> writes. Error = (predicted "
                             "- measured) / measured."),
                          this);
  hint->setWordWrap(true);
  auto* side = new QWidget(this);
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
    view->chart()->setAnimationOptions(QChart::NoAnimation);
    view->setMinimumSize(200, 150);
  }
  components_view_->chart()->setTitle(tr("Predicted vs measured GPU memory (open a run report)"));
  loss_view_->chart()->setTitle(tr("Loss per step"));
  table_ = new QTableWidget(this);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setAlternatingRowColors(true);
  table_->setMinimumHeight(120);

  auto* charts = new QSplitter(Qt::Horizontal, this);
  charts->addWidget(components_view_);
  charts->addWidget(loss_view_);
  charts->setStretchFactor(0, 3);
  charts->setStretchFactor(1, 2);
  charts->setSizes({600, 400});
  auto* right = new QSplitter(Qt::Vertical, this);
  right->addWidget(charts);
  right->addWidget(table_);
  right->setStretchFactor(0, 3);
  right->setStretchFactor(1, 2);
  right->setSizes({560, 440});
  auto* main = new QSplitter(Qt::Horizontal, this);
  main->addWidget(side);
  main->addWidget(right);
  main->setStretchFactor(0, 1);
  main->setStretchFactor(1, 4);
  main->setSizes({220, 1000});
  main->setChildrenCollapsible(false);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(main);

  connect(open, &QPushButton::clicked, this, &MeasuredView::openRequested);
  connect(remove, &QPushButton::clicked, this, &MeasuredView::removeSelected);
  connect(list_, &QListWidget::currentRowChanged, this, &MeasuredView::showSelected);
}

void MeasuredView::addReport(const RunReport& report) {
  reports_.push_back(report);
  list_->addItem(QString::fromStdString(report.title()));
  list_->item(list_->count() - 1)->setToolTip(QString::fromStdString(report.source));
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
  rebuildTable();
  rebuildLoss();
  showSelected();
}

void MeasuredView::showSelected() {
  QChart* chart = components_view_->chart();
  clear_chart(chart);
  predicted_set_ = measured_set_ = nullptr;
  const int row = list_->currentRow();
  if (row < 0 || row >= static_cast<int>(reports_.size())) {
    chart->setTitle(tr("Predicted vs measured GPU memory (open a run report)"));
    return;
  }
  const RunReport& report = reports_[static_cast<std::size_t>(row)];
  predicted_set_ = new QBarSet(tr("predicted"));
  measured_set_ = new QBarSet(tr("measured"));
  predicted_set_->setColor(QColor(0x9e, 0xb9, 0xd4));
  measured_set_->setColor(QColor(0x1f, 0x4e, 0x79));
  QStringList categories;
  double largest = 0.0;
  for (const auto& [name, predicted] : report.predicted_gpu_bytes) {
    const std::optional<Bytes> measured = report.measured(name);
    if (!measured) continue;  // only what both sides account for
    categories << component_display_name(name);
    predicted_set_->append(to_gib(predicted));
    measured_set_->append(to_gib(*measured));
    largest = std::max({largest, to_gib(predicted), to_gib(*measured)});
  }
  auto* series = new QBarSeries();
  series->append(predicted_set_);
  series->append(measured_set_);
  chart->addSeries(series);
  auto* x = new QBarCategoryAxis();
  x->append(categories);
  x->setLabelsAngle(-40);  // component names are long; slanted they need no room across
  chart->addAxis(x, Qt::AlignBottom);
  auto* y = new QValueAxis();
  y->setTitleText(tr("GiB per GPU"));
  y->setRange(0.0, std::max(largest, 1e-3) * 1.1);
  y->applyNiceNumbers();
  chart->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
  QString title = tr("%1: predicted vs measured").arg(QString::fromStdString(report.title()));
  if (report.predicted_step_seconds && report.measured_step_seconds) {
    title += tr("<br>step %1 predicted, %2 measured")
                 .arg(QString::fromStdString(format_seconds(*report.predicted_step_seconds)),
                      QString::fromStdString(format_seconds(*report.measured_step_seconds)));
  }
  chart->setTitle(title);
}

void MeasuredView::rebuildTable() {
  // Rows: every component any report has, then total, step time and tokens/s; three columns per report.
  QStringList rows;
  for (const RunReport& report : reports_) {
    for (const auto* side : {&report.predicted_gpu_bytes, &report.measured_gpu_bytes}) {
      for (const auto& [name, bytes] : *side) {
        if (name != "total" && !rows.contains(QString::fromStdString(name))) rows << QString::fromStdString(name);
      }
    }
  }
  rows << "total" << "step_seconds" << "tokens_per_second";
  table_->clear();
  table_->setRowCount(static_cast<int>(rows.size()));
  table_->setColumnCount(static_cast<int>(reports_.size() * 3));
  QStringList headers;
  for (const RunReport& report : reports_) {
    const QString name = QString::fromStdString(report.plan_label);
    headers << tr("%1\npredicted").arg(name) << tr("%1\nmeasured").arg(name) << tr("%1\nerror").arg(name);
  }
  table_->setHorizontalHeaderLabels(headers);
  QStringList row_headers;
  for (const QString& row : rows) {
    if (row == "step_seconds") row_headers << tr("step time (ms)");
    else if (row == "tokens_per_second") row_headers << tr("tokens/s");
    else row_headers << component_display_name(row.toStdString()) + tr(" (GiB)");
  }
  table_->setVerticalHeaderLabels(row_headers);
  auto cell = [this](int r, int c, const QString& text, const QString& tip = QString()) {
    auto* item = new QTableWidgetItem(text);
    item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    if (!tip.isEmpty()) item->setToolTip(tip);
    table_->setItem(r, c, item);
  };
  const QLocale english(QLocale::English);
  for (std::size_t k = 0; k < reports_.size(); ++k) {
    const RunReport& report = reports_[k];
    const int c = static_cast<int>(k * 3);
    for (int r = 0; r < static_cast<int>(rows.size()); ++r) {
      const std::string key = rows[r].toStdString();
      std::optional<double> predicted, measured;
      QString p_text, m_text;
      if (key == "step_seconds") {
        predicted = report.predicted_step_seconds;
        measured = report.measured_step_seconds;
        if (predicted) p_text = QString::number(*predicted * 1e3, 'f', 2);
        if (measured) m_text = QString::number(*measured * 1e3, 'f', 2);
      } else if (key == "tokens_per_second") {
        predicted = report.predicted_tokens_per_second;
        measured = report.measured_tokens_per_second;
        if (predicted) p_text = english.toString(*predicted, 'f', 0);
        if (measured) m_text = english.toString(*measured, 'f', 0);
      } else {
        if (auto b = report.predicted(key)) {
          predicted = static_cast<double>(*b);
          p_text = QString::number(to_gib(*b), 'f', 3);
        }
        if (auto b = report.measured(key)) {
          measured = static_cast<double>(*b);
          m_text = QString::number(to_gib(*b), 'f', 3);
        }
      }
      const bool bytes_row = key != "step_seconds" && key != "tokens_per_second";
      cell(r, c, p_text.isEmpty() ? tr("not predicted") : p_text,
           predicted && bytes_row ? english.toString(static_cast<qlonglong>(*predicted)) + " bytes" : QString());
      QString measured_tip =
          measured && bytes_row ? english.toString(static_cast<qlonglong>(*measured)) + " bytes" : QString();
      if (key == "total") measured_tip += " (" + QString::fromStdString(report.measured_total_basis) + ")";
      cell(r, c + 1, m_text.isEmpty() ? tr("not measured") : m_text, measured_tip);
      cell(r, c + 2, predicted && measured ? error_text(*predicted, *measured) : QString());
    }
  }
  table_->resizeColumnsToContents();
}

void MeasuredView::rebuildLoss() {
  QChart* chart = loss_view_->chart();
  clear_chart(chart);
  double largest = 0.0;
  std::size_t steps = 1;
  std::vector<QLineSeries*> all;
  for (const RunReport& report : reports_) {
    if (report.loss.empty()) continue;
    auto* series = new QLineSeries();
    series->setName(QString::fromStdString(report.plan_label));
    for (std::size_t i = 0; i < report.loss.size(); ++i) {
      series->append(static_cast<double>(i + 1), report.loss[i]);
      if (std::isfinite(report.loss[i])) largest = std::max(largest, report.loss[i]);
    }
    steps = std::max(steps, report.loss.size());
    chart->addSeries(series);
    all.push_back(series);
  }
  if (all.empty()) return;
  auto* x = new QValueAxis();
  x->setTitleText(tr("step"));
  x->setRange(1.0, static_cast<double>(steps));
  x->setLabelFormat("%.0f");
  chart->addAxis(x, Qt::AlignBottom);
  auto* y = new QValueAxis();
  y->setTitleText(tr("loss (nats)"));
  y->setRange(0.0, std::max(largest, 1e-3) * 1.05);
  chart->addAxis(y, Qt::AlignLeft);
  for (QLineSeries* series : all) {
    series->attachAxis(x);
    series->attachAxis(y);
  }
}

}  // namespace zeroplan
