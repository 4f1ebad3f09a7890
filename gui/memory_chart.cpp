#include "gui/memory_chart.h"

#include <algorithm>
#include <cmath>

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QCursor>
#include <QLegendMarker>
#include <QLineSeries>
#include <QPen>
#include <QStackedBarSeries>
#include <QToolTip>
#include <QValueAxis>

#include "core/units.h"
#include "gui/component_palette.h"
#include "gui/plan_tooltips.h"

namespace zeroplan {

MemoryChart::MemoryChart(QWidget* parent) : QChartView(parent) {
  setRenderHint(QPainter::Antialiasing);
  chart()->setTitle(tr("GPU memory per plan"));
  chart()->legend()->setAlignment(Qt::AlignBottom);
  chart()->setAnimationOptions(QChart::NoAnimation);
  setMinimumSize(320, 240);
}

QString MemoryChart::planLabel(const PlanResult& plan) {
  QString label = tr("stage %1").arg(plan.choice.stage);
  QStringList offloads;
  if (plan.choice.offload_optimizer != OffloadDevice::none) {
    offloads << "opt:" + QString::fromStdString(to_string(plan.choice.offload_optimizer));
  }
  if (plan.choice.offload_param != OffloadDevice::none) {
    offloads << "param:" + QString::fromStdString(to_string(plan.choice.offload_param));
  }
  for (const QString& offload : offloads) label += "<br>" + offload;
  return label;
}

QBarSet* MemoryChart::componentSet(const QString& component) const {
  if (!bars_) return nullptr;
  for (QBarSet* set : bars_->barSets()) {
    if (set->property("component").toString() == component) return set;
  }
  return nullptr;
}

void MemoryChart::setComparison(const Comparison& comparison, int recommended) {
  QChart* c = chart();
  c->removeAllSeries();
  for (QAbstractAxis* axis : c->axes()) {
    c->removeAxis(axis);
    delete axis;
  }
  plans_ = comparison.plans;
  categories_.clear();
  bars_ = new QStackedBarSeries();
  bars_->setBarWidth(0.6);

  // One bar set per component, in the planner's display order; each value is that plan's bytes in GiB.
  double tallest = 0.0;
  if (!plans_.empty()) {
    const auto components = plans_.front().memory.gpu.components();
    for (std::size_t k = 0; k < components.size(); ++k) {
      const std::string& name = components[k].first;
      auto* set = new QBarSet(component_display_name(name));
      set->setProperty("component", QString::fromStdString(name));
      set->setColor(component_color(name));
      set->setBorderColor(component_color(name).darker(130));
      for (const PlanResult& plan : plans_) set->append(to_gib(plan.memory.gpu.components()[k].second));
      bars_->append(set);
      connect(set, &QBarSet::hovered, this, [this, name](bool status, int index) {
        showTermTooltip(QString::fromStdString(name), status, index);
      });
    }
  }
  for (std::size_t i = 0; i < plans_.size(); ++i) {
    const PlanResult& plan = plans_[i];
    tallest = std::max(tallest, to_gib(plan.memory.gpu.total));
    // The verdict on each bar's label, as a mark and a colour (the title explains the marks), so it reads
    // without the capacity line and at any bar width.
    const bool is_recommended = static_cast<int>(i) == recommended;
    const QString mark = is_recommended ? QStringLiteral("&#9733;") : plan.fits ? QStringLiteral("&#10004;")
                                                                                : QStringLiteral("&#10008;");
    QString label = planLabel(plan);
    const int first_break = label.indexOf("<br>");
    QString first = first_break < 0 ? label : label.left(first_break);
    const QString rest = first_break < 0 ? QString() : label.mid(first_break);
    first = QString("<span style='color:%1'>%2%3 %4%5</span>")
                .arg((plan.fits ? fits_color() : does_not_fit_color()).name(), plan.fits && !is_recommended ? "" : "<b>",
                     mark, first, plan.fits && !is_recommended ? "" : "</b>");
    categories_ << first + rest;
  }
  c->addSeries(bars_);

  capacity_gib_ = to_gib(comparison.cluster.gpu_memory_bytes);
  capacity_ = new QLineSeries();
  capacity_->setName(tr("GPU capacity"));
  QPen pen(capacity_line_color());
  pen.setWidth(2);
  pen.setStyle(Qt::DashLine);
  capacity_->setPen(pen);
  // On a bar-category axis, x runs over category indices: -0.5 .. n-0.5 spans every bar.
  capacity_->append(-0.5, capacity_gib_);
  capacity_->append(static_cast<double>(plans_.size()) - 0.5, capacity_gib_);
  c->addSeries(capacity_);

  auto* x = new QBarCategoryAxis();
  x->append(categories_);
  c->addAxis(x, Qt::AlignBottom);
  auto* y = new QValueAxis();
  y->setTitleText(tr("GiB per GPU"));
  y->setLabelFormat("%.0f");
  y->setRange(0.0, std::max(tallest, capacity_gib_) * 1.08);
  y->applyNiceNumbers();
  c->addAxis(y, Qt::AlignLeft);
  for (QAbstractSeries* series : {static_cast<QAbstractSeries*>(bars_), static_cast<QAbstractSeries*>(capacity_)}) {
    series->attachAxis(x);
    series->attachAxis(y);
  }
  fitLabelFont();
  c->setTitle(tr("<b>GPU memory per plan</b>: %1 on %2 x %3, micro-batch %4, sequence %5<br>"
                 "<span style='color:%6'>&#10004; fits</span> &nbsp; <span style='color:%7'><b>&#10008; does not "
                 "fit</b></span> (GPU, host or NVMe) &nbsp; <span style='color:%6'><b>&#9733; recommended</b></span> "
                 "&nbsp; <span style='color:%8'>- - - GPU capacity %9</span>")
                  .arg(QString::fromStdString(comparison.model.name).toHtmlEscaped())
                  .arg(comparison.cluster.total_gpus())
                  .arg(QString::fromStdString(comparison.cluster.gpu_model).toHtmlEscaped())
                  .arg(comparison.training.micro_batch)
                  .arg(comparison.training.seq_len)
                  .arg(fits_color().name(), does_not_fit_color().name(), capacity_line_color().name(),
                       QString::fromStdString(format_gib(comparison.cluster.gpu_memory_bytes))));
}

void MemoryChart::resizeEvent(QResizeEvent* event) {
  QChartView::resizeEvent(event);
  fitLabelFont();
}

// The category labels shrink (down to a readable 6.5 pt) as the bars get narrower, instead of being cut short.
void MemoryChart::fitLabelFont() {
  const auto axes = chart()->axes(Qt::Horizontal);
  if (axes.isEmpty() || categories_.isEmpty()) return;
  const double per_category = chart()->plotArea().width() / categories_.size();
  QFont font = axes.front()->labelsFont();
  const double size = std::clamp(per_category / 11.0, 6.5, 9.0);
  if (std::abs(font.pointSizeF() - size) > 0.1) {
    font.setPointSizeF(size);
    axes.front()->setLabelsFont(font);
  }
}

void MemoryChart::showTermTooltip(const QString& component, bool hovered, int plan_index) {
  if (!hovered || plan_index < 0 || plan_index >= static_cast<int>(plans_.size())) {
    QToolTip::hideText();
    return;
  }
  QToolTip::showText(QCursor::pos(), component_tooltip(plans_[plan_index], component.toStdString()), this);
}

}  // namespace zeroplan
