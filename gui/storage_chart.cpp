#include "gui/storage_chart.h"

#include <algorithm>

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QCursor>
#include <QHorizontalBarSeries>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QPen>
#include <QToolTip>
#include <QValueAxis>

#include "core/units.h"
#include "gui/component_palette.h"
#include "gui/plan_tooltips.h"

namespace zeroplan {

namespace {

const QColor kHostColor(0x55, 0x6b, 0x8d);
const QColor kNvmeColor(0xb0, 0x7a, 0x30);

QLineSeries* capacity_line(const QString& name, const QColor& color, double gib, std::size_t plans) {
  auto* line = new QLineSeries();
  line->setName(name);
  QPen pen(color);
  pen.setWidth(2);
  pen.setStyle(Qt::DashLine);
  line->setPen(pen);
  // On a bar-category axis, y runs over category indices: -0.5 .. n-0.5 spans every bar.
  line->append(gib, -0.5);
  line->append(gib, static_cast<double>(plans) - 0.5);
  return line;
}

}  // namespace

StorageChart::StorageChart(QWidget* parent) : QChartView(parent) {
  setRenderHint(QPainter::Antialiasing);
  chart()->setAnimationOptions(QChart::NoAnimation);
  chart()->legend()->setAlignment(Qt::AlignBottom);
  setMinimumSize(200, 160);
}

void StorageChart::setComparison(const Comparison& comparison) {
  QChart* c = chart();
  c->removeAllSeries();
  for (QAbstractAxis* axis : c->axes()) {
    c->removeAxis(axis);
    delete axis;
  }
  plans_ = comparison.plans;
  const Bytes host_capacity = comparison.cluster.host_memory_bytes;
  const Bytes nvme_capacity = comparison.cluster.nvme_capacity_bytes;
  QString title = tr("<b>Host and NVMe per node</b><br><span style='color:%1'>- - host %2</span>")
                      .arg(kHostColor.name(), QString::fromStdString(format_gib(host_capacity)));
  title += nvme_capacity > 0 ? tr(" &nbsp;<span style='color:%1'>- - NVMe %2</span>")
                                   .arg(kNvmeColor.name(), QString::fromStdString(format_gib(nvme_capacity)))
                             : tr(" &nbsp;no NVMe");
  c->setTitle(title);

  host_set_ = new QBarSet(tr("host"));
  nvme_set_ = new QBarSet(tr("NVMe"));
  host_set_->setColor(kHostColor);
  nvme_set_->setColor(kNvmeColor);
  QStringList labels;
  double largest = 0.0;
  // Horizontal bars run bottom to top: the last plan first, so the bars read in the table's row order.
  for (auto it = plans_.rbegin(); it != plans_.rend(); ++it) {
    const PlanResult& plan = *it;
    host_set_->append(to_gib(plan.memory.host.total));
    nvme_set_->append(to_gib(plan.memory.nvme_bytes));
    largest = std::max({largest, to_gib(plan.memory.host.total), to_gib(plan.memory.nvme_bytes)});
    QString label = QString::fromStdString(plan.choice.label());
    label.replace("stage ", "").replace(" + ", " ").replace("param:", "p:").replace("opt:", "o:");
    if (!plan.host_fits || !plan.nvme_fits) label = "\u2718 " + label;  // does not fit on this node
    labels << label;
  }
  for (QBarSet* set : {host_set_, nvme_set_}) {
    const bool host = set == host_set_;
    connect(set, &QBarSet::hovered, this, [this, host](bool status, int index) {
      if (!status || index < 0 || index >= static_cast<int>(plans_.size())) {
        QToolTip::hideText();
        return;
      }
      const std::size_t plan = plans_.size() - 1 - static_cast<std::size_t>(index);  // bars are reversed
      QToolTip::showText(QCursor::pos(), component_tooltip(plans_[plan], host ? "host" : "nvme"), this);
    });
  }
  auto* series = new QHorizontalBarSeries();
  series->append(host_set_);
  series->append(nvme_set_);
  series->setBarWidth(0.8);
  c->addSeries(series);

  QList<QAbstractSeries*> all = {series};
  all << capacity_line(tr("host capacity %1").arg(QString::fromStdString(format_gib(host_capacity))), kHostColor,
                       to_gib(host_capacity), plans_.size());
  if (nvme_capacity > 0) {
    all << capacity_line(tr("NVMe capacity %1").arg(QString::fromStdString(format_gib(nvme_capacity))), kNvmeColor,
                         to_gib(nvme_capacity), plans_.size());
  }
  for (qsizetype i = 1; i < all.size(); ++i) {
    c->addSeries(all[i]);
    // The title names the capacity lines; the legend keeps to the two bar colours.
    for (QLegendMarker* marker : c->legend()->markers(all[i])) marker->setVisible(false);
  }

  auto* y = new QBarCategoryAxis();
  y->append(labels);
  // A category label taller than its slot is cut to "..." by Qt Charts: a smaller font keeps a dozen plans
  // readable in a short chart.
  QFont label_font = y->labelsFont();
  label_font.setPointSizeF(7.5);
  y->setLabelsFont(label_font);
  c->addAxis(y, Qt::AlignLeft);
  auto* x = new QValueAxis();
  x->setTitleText(tr("GiB per node"));
  x->setLabelFormat("%.0f");
  x->setRange(0.0, std::max({largest, to_gib(host_capacity), to_gib(nvme_capacity), 1.0}) * 1.05);
  x->applyNiceNumbers();
  x->setTickCount(4);
  c->addAxis(x, Qt::AlignBottom);
  for (QAbstractSeries* s : all) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
}

}  // namespace zeroplan
