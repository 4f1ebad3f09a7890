// The comparison as a table: one row per plan choice with the exact figures (GPU memory per component and in
// total, headroom, host and NVMe, communication bytes per step per collective, PCIe traffic, largest micro-batch
// that fits, and the simulator's step time, tokens/s, MFU and exposed communication). The display shows GiB and
// GB with the unit in the header; Qt::UserRole holds the exact number (bytes, seconds) for sorting, tests and
// CSV. Tooltips carry each term's formula. The recommended plan's row is highlighted.
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <QVariant>
#include <functional>
#include <vector>

#include "gui/comparison.h"
#include "gui/simulated_plans.h"

namespace zeroplan {

class PlanTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  explicit PlanTableModel(QObject* parent = nullptr);

  void setComparison(const Comparison& comparison, const SimulatedPlans& simulated);

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  // The column whose key is `key` ("gpu_total_bytes", "params_bytes", "all_gather_bytes", "step_seconds"...),
  // -1 when absent. Keys are also the CSV header.
  int column(const QString& key) const;
  QString columnKey(int column) const;
  int recommendedRow() const { return recommended_; }
  const PlanResult& plan(int row) const { return plans_[static_cast<std::size_t>(row)]; }

  // The whole table as CSV: a header of keys (units in the names), exact values (bytes, seconds).
  QString toCsv() const;

 private:
  struct Column {
    QString key;       // CSV header and lookup key
    QString header;    // display header, unit named
    QString tip;       // header tooltip: what it is and how it is derived
    // Exact value (bytes, seconds, count, text) of a row; null QVariant when not available.
    std::function<QVariant(std::size_t row)> value;
    // Display text from the exact value.
    std::function<QString(const QVariant&)> display;
    // Cell tooltip (formulas); may be empty.
    std::function<QString(std::size_t row)> tooltip;
  };
  void buildColumns();

  std::vector<Column> columns_;
  std::vector<PlanResult> plans_;
  std::vector<std::optional<PlanTiming>> timings_;
  bool counts_tokens_ = true;  // a transformer (tokens/s); a layer list counts samples (samples/s)
  std::optional<PlanChoice> configured_;
  int recommended_ = -1;
  int ranks_ = 1;
};

}  // namespace zeroplan
