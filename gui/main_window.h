// The main window: the input panel on the left; on the right three tabs: the comparison (GPU memory bars per
// plan, host and NVMe beside them, the table of exact figures), the timeline of the selected plan, and measured
// vs predicted from run reports. Every input change re-evaluates at once; a wrong input or file is reported
// (the InputError's message) and the previous state stays on screen.
#pragma once

#include <QMainWindow>
#include <memory>
#include <optional>

#include "gui/comparison.h"
#include "gui/error_reporter.h"
#include "gui/simulated_plans.h"

class QComboBox;
class QLabel;
class QSortFilterProxyModel;
class QSplitter;
class QTabWidget;
class QTableView;

namespace zeroplan {

class InputPanel;
class MeasuredView;
class MemoryChart;
class PlanTableModel;
class StorageChart;
class TimelineChart;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  enum class Tab { comparison = 0, timeline = 1, measured = 2 };

  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Replaces how errors are shown (tests inject a recorder instead of the dialog).
  void setErrorReporter(std::unique_ptr<ErrorReporter> reporter);

  // Evaluates the inputs and shows them; on InputError reports it, keeps the previous state and returns false.
  bool applyInputs(const GuiInputs& inputs);
  // Loads a run report into the measured-vs-predicted tab; reports and returns false when it is not one.
  bool openRunReport(const QString& path);
  // Sets the inputs to those of an opened report's run (its model, cluster, world size, training), so the
  // simulator's figures stand beside its measurements; reports and returns false when they cannot be used.
  bool useRunInputs(int report_index);
  // Selects a plan (index into comparison().plans) for the timeline and the table.
  void selectPlan(int index);
  void showTab(Tab tab);

  // Exports: the current tab's charts as PNG, the plan table as CSV. Report and return false on failure.
  bool exportChartPng(const QString& path);
  bool exportTableCsv(const QString& path);

  const std::optional<Comparison>& comparison() const { return comparison_; }
  const SimulatedPlans& simulated() const { return simulated_; }
  int selectedPlan() const { return selected_; }

  InputPanel* inputPanel() const { return input_panel_; }
  MemoryChart* memoryChart() const { return memory_chart_; }
  StorageChart* storageChart() const { return storage_chart_; }
  PlanTableModel* planModel() const { return plan_model_; }
  QTableView* planTable() const { return plan_table_; }
  TimelineChart* timeline() const { return timeline_; }
  MeasuredView* measuredView() const { return measured_view_; }
  QTabWidget* tabs() const { return tabs_; }

 private:
  void buildMenus();
  void showComparison();
  void showTimeline();
  void onTableSelection();
  void chooseRunReport();
  void chooseChartExport();
  void chooseTableExport();

  std::unique_ptr<ErrorReporter> reporter_;
  std::optional<Comparison> comparison_;
  SimulatedPlans simulated_;
  int selected_ = -1;
  std::optional<PlanChoice> user_selected_choice_;  // kept across input changes

  InputPanel* input_panel_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QSplitter* charts_ = nullptr;
  QSplitter* lower_ = nullptr;
  MemoryChart* memory_chart_ = nullptr;
  StorageChart* storage_chart_ = nullptr;
  PlanTableModel* plan_model_ = nullptr;
  QSortFilterProxyModel* plan_proxy_ = nullptr;
  QTableView* plan_table_ = nullptr;
  QComboBox* timeline_plan_box_ = nullptr;
  TimelineChart* timeline_ = nullptr;
  MeasuredView* measured_view_ = nullptr;
  QLabel* recommendation_label_ = nullptr;
  bool updating_selection_ = false;
};

}  // namespace zeroplan
