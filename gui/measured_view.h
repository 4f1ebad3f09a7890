// Measured vs predicted: the run reports opened so far (zeroplan run --report), a chart of predicted beside
// measured GPU bytes per component for the selected report, a table of every report's figures with the error
// of each prediction (per component, total, step time, tokens/s), and the loss per step of every report.
#pragma once

#include <QWidget>
#include <vector>

#include "gui/run_report.h"

class QChartView;
class QListWidget;
class QTableWidget;
class QBarSet;

namespace zeroplan {

class MeasuredView : public QWidget {
  Q_OBJECT

 public:
  explicit MeasuredView(QWidget* parent = nullptr);

  void addReport(const RunReport& report);  // appends and selects it
  void removeSelected();
  const std::vector<RunReport>& reports() const { return reports_; }
  QTableWidget* table() const { return table_; }
  QBarSet* predictedSet() const { return predicted_set_; }
  QBarSet* measuredSet() const { return measured_set_; }

 signals:
  void openRequested();

 private:
  void showSelected();
  void rebuildTable();
  void rebuildLoss();

  std::vector<RunReport> reports_;
  QListWidget* list_ = nullptr;
  QChartView* components_view_ = nullptr;
  QChartView* loss_view_ = nullptr;
  QTableWidget* table_ = nullptr;
  QBarSet* predicted_set_ = nullptr;
  QBarSet* measured_set_ = nullptr;
};

}  // namespace zeroplan
