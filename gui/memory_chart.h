// The comparison chart: one stacked bar per plan choice (stage and offload), one segment per memory component
// in the palette's colours, the GPU's capacity as a dashed line, and each bar's verdict (fits / does not fit)
// under it. Hovering a segment shows the component's formula for that plan (explain_memory's terms).
#pragma once

#include <QChartView>
#include <QStringList>
#include <vector>

#include "gui/comparison.h"

class QBarSet;
class QStackedBarSeries;
class QLineSeries;

namespace zeroplan {

class MemoryChart : public QChartView {
  Q_OBJECT

 public:
  explicit MemoryChart(QWidget* parent = nullptr);

  void setComparison(const Comparison& comparison, int recommended);

  // For tests and the legend: the bar set of a component ("params"), nullptr when absent.
  QBarSet* componentSet(const QString& component) const;
  QStringList categories() const { return categories_; }
  // The capacity line's value in GiB.
  double capacityGiB() const { return capacity_gib_; }

  // The bar chart's short label of a plan: "stage 2", "stage 3<br>opt:cpu<br>param:nvme" (rich text, one line each).
  static QString planLabel(const PlanResult& plan);

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void fitLabelFont();
  void showTermTooltip(const QString& component, bool hovered, int plan_index);

  QStackedBarSeries* bars_ = nullptr;
  QLineSeries* capacity_ = nullptr;
  QStringList categories_;
  double capacity_gib_ = 0.0;
  std::vector<PlanResult> plans_;  // the plans shown, for the tooltips
};

}  // namespace zeroplan
