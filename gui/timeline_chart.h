// The timeline view: the simulated step of the selected plan as a Gantt chart, one lane per resource (GPU
// compute, NCCL, host-to-device and device-to-host copies, host CPU, NVMe) with tasks coloured by kind, and the
// GPU memory curve over the same time axis under it, with the GPU's capacity as a line. Hovering a task names
// it (kind, layer, micro-step, duration, bytes).
#pragma once

#include <QWidget>

#include "gui/simulated_plans.h"

class QChart;
class QChartView;
class QLineSeries;
class QLabel;

namespace zeroplan {

class TimelineChart : public QWidget {
  Q_OBJECT

 public:
  explicit TimelineChart(QWidget* parent = nullptr);

  void setStep(const PlanStep& step);
  // Shown instead of a timeline when there is none (e.g. the simulator failed for these inputs).
  void setMessage(const QString& message);

  const PlanStep& step() const { return step_; }
  QChartView* ganttView() const { return gantt_view_; }
  QChartView* memoryView() const { return memory_view_; }
  QLineSeries* memoryCurve() const { return memory_curve_; }

 private:
  void alignPlotAreas();
  void showTaskTooltip(int resource, const QPointF& point, bool state);

  QChartView* gantt_view_ = nullptr;
  QChartView* memory_view_ = nullptr;
  QLineSeries* memory_curve_ = nullptr;
  QLabel* message_ = nullptr;
  PlanStep step_;
  int base_left_margin_ = 0;
};

}  // namespace zeroplan
