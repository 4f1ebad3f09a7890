// The selected run report in detail: what ran (model, stage, ranks, backend) and which of the GUI's plans it is
// compared with (or plainly why none); every rank's memory per component beside the plan's, with the spread
// across ranks; and per collective kind the bytes per step beside the plan's communication model and the busy
// seconds (and exposed communication) beside the simulator's.
#pragma once

#include <QWidget>
#include <string>

#include "gui/report_plan_match.h"
#include "gui/run_report.h"

class QLabel;
class QTableWidget;

namespace zeroplan {

class RunDetailView : public QWidget {
  Q_OBJECT

 public:
  // The communication table's columns.
  enum CommColumn {
    plan_bytes = 0,      // the plan's bytes per step (plans[0].comm_bytes_per_step)
    measured_bytes,      // counted where each collective was issued (measured.comm_bytes_per_step)
    bytes_difference,    // measured - plan, exact
    rank_spread,         // max - min over the ranks' own counts
    simulated_ms,        // the simulator's busy time for the matched plan
    measured_ms,         // the run's busy time (median after warm-up)
    comm_columns
  };

  explicit RunDetailView(QWidget* parent = nullptr);

  // Shows one report (nullptr: none selected); label is its name in the view (report_labels()).
  void setReport(const RunReport* report, const std::string& label, const ReportPlanMatch& match);

  QLabel* summary() const { return summary_; }
  // Rows keyed by the vertical header item's Qt::UserRole: memory components ("params", ..., "workspace"),
  // "total", "allocator_peak" (when the ranks have a device view beside it) and "step_seconds". Column 0 is the
  // plan's prediction, column 1 + r rank r, the last the spread (max - min over ranks). A figure's exact value
  // (bytes, seconds) is its cell's Qt::UserRole.
  QTableWidget* ranksTable() const { return ranks_table_; }
  // Rows keyed the same way: the collective kinds ("all_reduce", "reduce_scatter", "all_gather") and "exposed".
  QTableWidget* commTable() const { return comm_table_; }
  int ranksRow(const QString& key) const;
  int commRow(const QString& key) const;

 signals:
  // The summary's "use the run's inputs" link.
  void useRunInputsRequested();

 protected:
  void resizeEvent(QResizeEvent* event) override;  // a table that no longer fits gains its scroll bar's height

 private:
  void showSummary(const RunReport& report, const std::string& label, const ReportPlanMatch& match);
  void fillRanks(const RunReport& report);
  void fillComm(const RunReport& report, const ReportPlanMatch& match);

  QLabel* summary_ = nullptr;
  QTableWidget* ranks_table_ = nullptr;
  QTableWidget* comm_table_ = nullptr;
};

}  // namespace zeroplan
