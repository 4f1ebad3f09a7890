#include "gui/storage_chart.h"

#include <algorithm>

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QCursor>
#include <QHorizontalBarSeries>
#include <QLegend>
#include <QLineSeries>
#include <QPen>
#include <QToolTip>
#include <QValueAxis>

#include "core/units.h"
#include "gui/component_palette.h"
#include "gui/plan_tooltips.h"

namespace zeroplan {

StorageChart::StorageChart(Kind kind, bool with_labels, QWidget* parent)
    : QChartView(parent), kind_(kind), with_labels_(with_labels) {
  setRenderHint(QPainter::Antialiasing);
  chart()->setAnimationOptions(QChart::NoAnimation);
  chart()->legend()->setAlignment(Qt::AlignBottom);
  setMinimumSize(with_labels ? 170 : 100, 160);
}

void StorageChart::setComparison(const Comparison& comparison) {
  QChart* c = chart();
  c->removeAllSeries();
  for (QAbstractAxis* axis : c->axes()) {
    c->removeAxis(axis);
    delete axis;
  }
  plans_ = comparison.plans;
  const bool host = kind_ == Kind::host;
  const Bytes capacity = host ? comparison.cluster.host_memory_bytes : comparison.cluster.nvme_capacity_bytes;
  c->setTitle((host ? tr("Host memory per node") : tr("NVMe per node")) + "<br>" +
              (capacity > 0 ? tr("capacity %1").arg(QString::fromStdString(format_gib(capacity)))
                            : tr("none in this cluster")));

  set_ = new QBarSet(host ? tr("host") : tr("NVMe"));
  set_->setColor(host ? QColor(0x55, 0x6b, 0x8d) : QColor(0xb0, 0x7a, 0x30));
  QStringList labels;
  double largest = 0.0;
  // Horizontal bars run bottom to top: the last plan first, so the bars read in the table's row order.
  for (auto it = plans_.rbegin(); it != plans_.rend(); ++it) {
    const PlanResult& plan = *it;
    const Bytes bytes = host ? plan.memory.host.total : plan.memory.nvme_bytes;
    const bool fits = host ? plan.host_fits : plan.nvme_fits;
    set_->append(to_gib(bytes));
    largest = std::max(largest, to_gib(bytes));
    QString label = QString::fromStdString(plan.choice.label());
    label.replace("stage ", "").replace(" + ", " ");
    if (!fits) label += " \u2718";  // does not fit on this node
    labels << label;
  }
  connect(set_, &QBarSet::hovered, this, [this, host](bool status, int index) {
    if (!status || index < 0 || index >= static_cast<int>(plans_.size())) {
      QToolTip::hideText();
      return;
    }
    const std::size_t plan = plans_.size() - 1 - static_cast<std::size_t>(index);  // bars are reversed
    QToolTip::showText(QCursor::pos(), component_tooltip(plans_[plan], host ? "host" : "nvme"), this);
  });
  auto* series = new QHorizontalBarSeries();
  series->append(set_);
  series->setBarWidth(0.7);
  c->addSeries(series);

  auto* capacity_line = new QLineSeries();
  capacity_line->setName(tr("capacity"));
  QPen pen(capacity_line_color());
  pen.setWidth(2);
  pen.setStyle(Qt::DashLine);
  capacity_line->setPen(pen);
  capacity_line->append(to_gib(capacity), -0.5);
  capacity_line->append(to_gib(capacity), static_cast<double>(plans_.size()) - 0.5);
  c->addSeries(capacity_line);

  auto* y = new QBarCategoryAxis();
  y->append(labels);
  y->setLabelsVisible(with_labels_);
  // A category label taller than its bar's slot is cut to "..." by Qt Charts: a smaller font keeps 14 plans
  // readable in a short chart.
  QFont label_font = y->labelsFont();
  label_font.setPointSizeF(7.5);
  y->setLabelsFont(label_font);
  c->addAxis(y, Qt::AlignLeft);
  auto* x = new QValueAxis();
  x->setTitleText(tr("GiB"));
  x->setLabelFormat("%.0f");
  x->setRange(0.0, std::max({largest, to_gib(capacity), 1.0}) * 1.05);
  x->applyNiceNumbers();
  x->setTickCount(4);
  c->addAxis(x, Qt::AlignBottom);
  for (QAbstractSeries* s : {static_cast<QAbstractSeries*>(series), static_cast<QAbstractSeries*>(capacity_line)}) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
}

}  // namespace zeroplan
