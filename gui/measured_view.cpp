#include "gui/measured_view.h"

#include <algorithm>
#include <cmath>

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
#include <QScrollBar>
#include <QSplitter>
#include <QTableWidget>
#include <QToolTip>
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
// Below 0.1% one decimal would print "-0.0%"; three show the size and the sign of what is left.
QString error_text(double predicted, double measured) {
  if (measured == 0.0) return predicted == 0.0 ? QStringLiteral("0.0%") : QStringLiteral("n/a (measured 0)");
  const double percent = (predicted - measured) / measured * 100.0;
  if (percent == 0.0) return QStringLiteral("0.0%");
  return QString("%1%2%").arg(percent > 0.0 ? "+" : "").arg(percent, 0, 'f', std::abs(percent) < 0.1 ? 3 : 1);
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
    view->chart()->setAnimationOptions(QChart::NoAnimation);
    view->setMinimumSize(200, 150);
    // The default frame around a chart costs about 40 pixels of each chart's width; at small windows they are
    // better spent on the plot.
    view->chart()->setMargins(QMargins(4, 4, 4, 4));
    view->chart()->setBackgroundRoundness(0);
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
  auto* right = new QSplitter(Qt::Vertical, this);
  right->addWidget(charts);
  right->addWidget(table_);
  right->setStretchFactor(0, 3);
  right->setStretchFactor(1, 2);
  right->setSizes({560, 440});
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
  legend->setGeometry(QRectF(plot.right() - width - 6.0, plot.top() + 6.0, width, height));
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
  std::vector<std::string> names;
  for (const auto& [name, predicted] : report.predicted_gpu_bytes) {
    const std::optional<Bytes> measured = report.measured(name);
    if (!measured) continue;  // only what both sides account for
    categories << component_short_name(name);
    names.push_back(name);
    predicted_set_->append(to_gib(predicted));
    measured_set_->append(to_gib(*measured));
    largest = std::max({largest, to_gib(predicted), to_gib(*measured)});
  }
  // Horizontal bars: the component names sit level at the left, each as wide as it needs, so none is cut at any
  // window width (under vertical bars they had one bar pair's width and were elided to "para...", "mast...").
  auto* series = new QHorizontalBarSeries();
  series->append(predicted_set_);
  series->append(measured_set_);
  chart->addSeries(series);
  auto* components = new QBarCategoryAxis();
  components->append(categories);
  components->setReverse(true);  // top-down in the table's order, total last
  chart->addAxis(components, Qt::AlignLeft);
  auto* gib = new QValueAxis();
  gib->setTitleText(tr("GiB per GPU"));
  gib->setRange(0.0, std::max(largest, 1e-3) * 1.1);
  gib->applyNiceNumbers();
  gib->setLabelFormat("%.3g");  // "10", not "10.0": the ticks fit a narrow chart
  chart->addAxis(gib, Qt::AlignBottom);
  series->attachAxis(components);
  series->attachAxis(gib);
  // Hovering a bar names the component in full, with both figures.
  connect(series, &QHorizontalBarSeries::hovered, this, [this, report_index = static_cast<std::size_t>(row), names](
                                                   bool status, int index, QBarSet*) {
    if (!status || report_index >= reports_.size() || index < 0 || index >= static_cast<int>(names.size())) {
      QToolTip::hideText();
      return;
    }
    const RunReport& shown = reports_[report_index];
    const std::string& name = names[static_cast<std::size_t>(index)];
    QToolTip::showText(QCursor::pos(), tr("%1: %2 predicted, %3 measured")
                                           .arg(component_display_name(name),
                                                QString::fromStdString(format_bytes(*shown.predicted(name))),
                                                QString::fromStdString(format_bytes(*shown.measured(name)))));
  });
  QString title = tr("%1, %2: GPU memory")
                      .arg(QString::fromStdString(labels_[static_cast<std::size_t>(row)]).toHtmlEscaped(),
                           QString::fromStdString(report.plan_label).toHtmlEscaped());
  if (report.predicted_step_seconds && report.measured_step_seconds) {
    title += tr("<br><small>step: %1 predicted, %2 measured</small>")
                 .arg(QString::fromStdString(format_seconds(*report.predicted_step_seconds)),
                      QString::fromStdString(format_seconds(*report.measured_step_seconds)));
  }
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
  table_->clear();
  table_->setRowCount(static_cast<int>(rows.size()));
  table_->setColumnCount(static_cast<int>(reports_.size() * 3));
  QStringList headers;
  for (const std::string& label : labels_) {
    const QString name = stacked(label);
    headers << tr("%1\npredicted").arg(name) << tr("%1\nmeasured").arg(name) << tr("%1\nerror").arg(name);
  }
  table_->setHorizontalHeaderLabels(headers);
  for (int r = 0; r < static_cast<int>(rows.size()); ++r) {
    const QString& row = rows[r];
    QString header;
    if (row == "step_seconds") header = tr("step time (ms)");
    else if (row == "tokens_per_second") header = tr("tokens/s");
    else header = component_display_name(row.toStdString()) + tr(" (GiB)");
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
        if (predicted) p_text = QString::number(*predicted * 1e3, 'f', 2), p_exact = *predicted;
        if (measured) m_text = QString::number(*measured * 1e3, 'f', 2), m_exact = *measured;
      } else if (key == "tokens_per_second") {
        predicted = report.predicted_tokens_per_second;
        measured = report.measured_tokens_per_second;
        if (predicted) p_text = english.toString(*predicted, 'f', 0), p_exact = *predicted;
        if (measured) m_text = english.toString(*measured, 'f', 0), m_exact = *measured;
      } else {
        if (auto b = report.predicted(key)) {
          predicted = static_cast<double>(*b);
          p_exact = static_cast<qlonglong>(*b);
          p_text = QString::number(to_gib(*b), 'f', 3);
        }
        if (auto b = report.measured(key)) {
          measured = static_cast<double>(*b);
          m_exact = static_cast<qlonglong>(*b);
          m_text = QString::number(to_gib(*b), 'f', 3);
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
  // No taller than its rows (and a horizontal scroll bar): in a tall window the charts get the rest rather than
  // the table an empty area.
  table_->setMaximumHeight(table_->horizontalHeader()->sizeHint().height() + table_->verticalHeader()->length() +
                           2 * table_->frameWidth() + table_->horizontalScrollBar()->sizeHint().height());
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
