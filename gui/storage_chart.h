// A small horizontal bar chart of one off-GPU memory per plan (host memory per node, or NVMe per node) with the
// node's capacity as a line; the comparison view shows one for the host and one for NVMe beside the GPU chart.
#pragma once

#include <QChartView>
#include <QColor>
#include <QString>
#include <vector>

#include "gui/comparison.h"

class QBarSet;

namespace zeroplan {

class StorageChart : public QChartView {
  Q_OBJECT

 public:
  enum class Kind { host, nvme };
  // with_labels: whether the plan names are on the axis (the NVMe chart sits right of the host chart, in the
  // same order, and leaves them out to give its bars the room).
  StorageChart(Kind kind, bool with_labels, QWidget* parent = nullptr);

  void setComparison(const Comparison& comparison);
  QBarSet* barSet() const { return set_; }  // one value per plan (GiB), the last plan first

 private:
  Kind kind_;
  bool with_labels_;
  QBarSet* set_ = nullptr;
  std::vector<PlanResult> plans_;
};

}  // namespace zeroplan
