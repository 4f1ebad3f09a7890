// Host memory and NVMe per node for every plan, as horizontal bar pairs in the table's row order, with the
// node's host and NVMe capacity as dashed lines; the comparison view shows it beside the table. Plans that do
// not fit on the host or NVMe are marked on their label.
#pragma once

#include <QChartView>
#include <vector>

#include "gui/comparison.h"

class QBarSet;

namespace zeroplan {

class StorageChart : public QChartView {
  Q_OBJECT

 public:
  explicit StorageChart(QWidget* parent = nullptr);

  void setComparison(const Comparison& comparison);
  // One value per plan (GiB), the last plan first (horizontal bars run bottom to top).
  QBarSet* hostSet() const { return host_set_; }
  QBarSet* nvmeSet() const { return nvme_set_; }

 private:
  QBarSet* host_set_ = nullptr;
  QBarSet* nvme_set_ = nullptr;
  std::vector<PlanResult> plans_;
};

}  // namespace zeroplan
