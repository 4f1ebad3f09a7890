// Measured vs predicted: the run reports opened so far (zeroplan run --report), a chart of predicted beside
// measured GPU bytes per component for the selected report (the lowest and the highest rank where it has
// several), the selected report in detail (every rank's memory, communication per collective kind beside the
// plan's and the simulator's: RunDetailView), a table of every report's figures with the error of each
// prediction (per component, total, step time, tokens/s), and the loss per step of every report.
#pragma once

#include <QWidget>
#include <string>
#include <vector>

#include "gui/report_plan_match.h"
#include "gui/run_report.h"

class QChart;
class QChartView;
class QListWidget;
class QSplitter;
class QTableWidget;
class QTabWidget;
class QBarSet;

namespace zeroplan {

class RunDetailView;

class MeasuredView : public QWidget {
  Q_OBJECT

 public:
  explicit MeasuredView(QWidget* parent = nullptr);

  void addReport(const RunReport& report);  // appends and selects it
  void removeSelected();
  // The GUI's plans, which the selected report is matched with for the simulator's figures (nullptr: none yet).
  // The comparison must stay alive until the next call (MainWindow passes the one it shows).
  void setComparison(const Comparison* comparison);
  const std::vector<RunReport>& reports() const { return reports_; }
  // report_labels(reports()): the names the list, the legends and the table's headers use.
  const std::vector<std::string>& labels() const { return labels_; }
  QListWidget* list() const { return list_; }
  // Rows carry their key ("params", ..., "total", "step_seconds", "tokens_per_second") as the vertical header
  // item's Qt::UserRole; report k's columns are 3k (predicted), 3k+1 (measured), 3k+2 (error), and a figure's
  // exact value (bytes, seconds, tokens/s) is the cell's Qt::UserRole.
  QTableWidget* table() const { return table_; }
  int tableRow(const QString& key) const;
  QChart* componentsChart() const;
  QChart* lossChart() const;
  QBarSet* predictedSet() const { return predicted_set_; }
  // The measured bars: one set for a one-rank report, else the lowest and the highest rank's figures.
  const std::vector<QBarSet*>& measuredSets() const { return measured_sets_; }
  QBarSet* measuredSet() const { return measured_sets_.empty() ? nullptr : measured_sets_.back(); }
  RunDetailView* detail() const { return detail_; }
  QTabWidget* lowerTabs() const { return lower_tabs_; }
  // The selected report's match with the GUI's plans (what the detail shows).
  const ReportPlanMatch& selectedMatch() const { return selected_match_; }

 signals:
  void openRequested();
  // The detail's "use the run's inputs": the window sets its inputs to report `index`'s.
  void useRunInputsRequested(int index);

 private:
  void relabel();
  void showSelected();
  void rebuildTable();
  void rebuildLoss();
  void placeLossLegend();
  void widenSide();

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  std::vector<RunReport> reports_;
  std::vector<std::string> labels_;
  QSplitter* main_splitter_ = nullptr;
  int wanted_side_width_ = 0;  // pending widening of the report list for its labels; 0 once applied
  QListWidget* list_ = nullptr;
  QChartView* components_view_ = nullptr;
  QChartView* loss_view_ = nullptr;
  QTableWidget* table_ = nullptr;
  QBarSet* predicted_set_ = nullptr;
  std::vector<QBarSet*> measured_sets_;
  QTabWidget* lower_tabs_ = nullptr;
  RunDetailView* detail_ = nullptr;
  const Comparison* comparison_ = nullptr;
  ReportPlanMatch selected_match_;
};

}  // namespace zeroplan
