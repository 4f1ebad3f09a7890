#include "gui/main_window.h"

#include <QAction>
#include <QApplication>
#include <QComboBox>
#include <QFile>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QKeySequence>
#include <QLabel>
#include <QMenuBar>
#include <QScrollArea>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QTextStream>
#include <QVBoxLayout>

#include "core/input_error.h"
#include "gui/input_panel.h"
#include "gui/measured_view.h"
#include "gui/memory_chart.h"
#include "gui/plan_table_model.h"
#include "gui/report_plan_match.h"
#include "gui/run_report.h"
#include "gui/storage_chart.h"
#include "gui/timeline_chart.h"

namespace zeroplan {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("zeroplan: ZeRO stages side by side"));
  reporter_ = std::make_unique<DialogErrorReporter>(this);

  // Inputs on the left, in a scroll area so a small window still reaches every field.
  input_panel_ = new InputPanel(this);
  auto* input_scroll = new QScrollArea(this);
  input_scroll->setWidget(input_panel_);
  input_scroll->setWidgetResizable(true);
  input_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  input_scroll->setMinimumWidth(220);

  // The comparison tab: the GPU chart over the whole width (one bar per plan needs it), under it the table with
  // the host and NVMe chart beside it, its bars in the table's row order.
  memory_chart_ = new MemoryChart(this);
  storage_chart_ = new StorageChart(this);

  plan_model_ = new PlanTableModel(this);
  plan_proxy_ = new QSortFilterProxyModel(this);
  plan_proxy_->setSourceModel(plan_model_);
  plan_proxy_->setSortRole(Qt::UserRole);
  plan_table_ = new QTableView(this);
  plan_table_->setModel(plan_proxy_);
  plan_table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  plan_table_->setSelectionMode(QAbstractItemView::SingleSelection);
  plan_table_->setSortingEnabled(true);
  plan_table_->sortByColumn(-1, Qt::AscendingOrder);  // the planner's order until the user sorts
  plan_table_->verticalHeader()->hide();
  plan_table_->verticalHeader()->setDefaultSectionSize(plan_table_->fontMetrics().height() + 6);
  plan_table_->horizontalHeader()->setDefaultAlignment(Qt::AlignCenter);
  plan_table_->setWordWrap(false);
  plan_table_->setMinimumSize(200, 120);

  lower_ = new QSplitter(Qt::Horizontal, this);
  lower_->addWidget(plan_table_);
  lower_->addWidget(storage_chart_);
  lower_->setStretchFactor(0, 3);
  lower_->setStretchFactor(1, 1);
  lower_->setChildrenCollapsible(false);
  lower_->setSizes({880, 400});  // proportions; the splitter scales them to its width
  charts_ = new QSplitter(Qt::Vertical, this);
  charts_->addWidget(memory_chart_);
  charts_->addWidget(lower_);
  charts_->setStretchFactor(0, 5);
  charts_->setStretchFactor(1, 4);
  charts_->setChildrenCollapsible(false);
  charts_->setSizes({520, 480});
  QWidget* comparison_split = charts_;

  // The timeline tab: which plan, then the Gantt chart and the memory curve.
  timeline_plan_box_ = new QComboBox(this);
  timeline_plan_box_->setToolTip(tr("The plan whose simulated step is shown (also: select a row of the table)"));
  timeline_ = new TimelineChart(this);
  auto* timeline_page = new QWidget(this);
  auto* timeline_layout = new QVBoxLayout(timeline_page);
  auto* plan_row = new QHBoxLayout();
  auto* plan_label = new QLabel(tr("&Plan:"), timeline_page);
  plan_label->setBuddy(timeline_plan_box_);
  plan_row->addWidget(plan_label);
  plan_row->addWidget(timeline_plan_box_);
  plan_row->addStretch(1);
  timeline_layout->addLayout(plan_row);
  timeline_layout->addWidget(timeline_, 1);

  measured_view_ = new MeasuredView(this);

  tabs_ = new QTabWidget(this);
  tabs_->addTab(comparison_split, tr("&Comparison"));
  tabs_->addTab(timeline_page, tr("&Timeline"));
  tabs_->addTab(measured_view_, tr("&Measured vs predicted"));

  auto* main_split = new QSplitter(Qt::Horizontal, this);
  main_split->addWidget(input_scroll);
  main_split->addWidget(tabs_);
  main_split->setStretchFactor(0, 0);
  main_split->setStretchFactor(1, 1);
  main_split->setChildrenCollapsible(false);
  setCentralWidget(main_split);

  recommendation_label_ = new QLabel(this);
  statusBar()->addWidget(recommendation_label_, 1);

  buildMenus();
  connect(input_panel_, &InputPanel::inputsChanged, this, [this](const GuiInputs& inputs) { applyInputs(inputs); });
  connect(plan_table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &MainWindow::onTableSelection);
  connect(timeline_plan_box_, &QComboBox::currentIndexChanged, this, [this](int index) {
    if (updating_selection_ || index < 0) return;
    user_selected_choice_ = comparison_->plans[static_cast<std::size_t>(index)].choice;
    selectPlan(index);
  });
  connect(measured_view_, &MeasuredView::openRequested, this, &MainWindow::chooseRunReport);
  connect(measured_view_, &MeasuredView::useRunInputsRequested, this, &MainWindow::useRunInputs);
  resize(1400, 900);
}

MainWindow::~MainWindow() = default;

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  auto add = [this](QMenu* menu, const QString& text, const QKeySequence& keys, auto slot) {
    QAction* action = menu->addAction(text);
    action->setShortcut(keys);
    connect(action, &QAction::triggered, this, slot);
    return action;
  };
  add(file, tr("Open &model…"), QKeySequence::Open, [this] { input_panel_->chooseModelFile(); });
  add(file, tr("Open c&luster…"), QKeySequence(tr("Ctrl+L")), [this] { input_panel_->chooseClusterFile(); });
  add(file, tr("Open &DeepSpeed config…"), QKeySequence(tr("Ctrl+D")), [this] { input_panel_->chooseDeepSpeedConfig(); });
  add(file, tr("Open &run report…"), QKeySequence(tr("Ctrl+R")), [this] { chooseRunReport(); });
  file->addSeparator();
  add(file, tr("Export chart as &PNG…"), QKeySequence(tr("Ctrl+E")), [this] { chooseChartExport(); });
  add(file, tr("Export table as &CSV…"), QKeySequence(tr("Ctrl+Shift+E")), [this] { chooseTableExport(); });
  file->addSeparator();
  add(file, tr("&Quit"), QKeySequence::Quit, [this] { close(); });

  QMenu* view = menuBar()->addMenu(tr("&View"));
  add(view, tr("&Comparison"), QKeySequence(tr("Ctrl+1")), [this] { showTab(Tab::comparison); });
  add(view, tr("&Timeline"), QKeySequence(tr("Ctrl+2")), [this] { showTab(Tab::timeline); });
  add(view, tr("&Measured vs predicted"), QKeySequence(tr("Ctrl+3")), [this] { showTab(Tab::measured); });
}

void MainWindow::setErrorReporter(std::unique_ptr<ErrorReporter> reporter) { reporter_ = std::move(reporter); }

bool MainWindow::applyInputs(const GuiInputs& inputs) {
  // Build everything first; only a complete result replaces what is shown.
  Comparison comparison;
  SimulatedPlans simulated;
  try {
    comparison = build_comparison(inputs);
    simulated = simulate_plans(comparison);
  } catch (const InputError& error) {
    if (comparison_) {  // the panel shows the previous state again
      input_panel_->showResolved(*comparison_);
      input_panel_->showSimulationNote(QString::fromStdString(simulated_.notes));
    }
    reporter_->report(tr("Cannot use these inputs"), QString::fromStdString(error.what()));
    return false;
  }
  comparison_ = std::move(comparison);
  simulated_ = std::move(simulated);
  input_panel_->showResolved(*comparison_);
  input_panel_->showSimulationNote(QString::fromStdString(simulated_.notes));
  showComparison();
  measured_view_->setComparison(&*comparison_);  // the selected report is matched with the new plans
  return true;
}

bool MainWindow::useRunInputs(int report_index) {
  const std::vector<RunReport>& reports = measured_view_->reports();
  if (report_index < 0 || report_index >= static_cast<int>(reports.size())) return false;
  GuiInputs inputs;
  try {
    inputs = inputs_of_report(reports[static_cast<std::size_t>(report_index)]);
  } catch (const InputError& error) {
    reporter_->report(tr("Cannot use the run's inputs"), QString::fromStdString(error.what()));
    return false;
  }
  return applyInputs(inputs);
}

void MainWindow::showComparison() {
  const Comparison& c = *comparison_;
  memory_chart_->setComparison(c, simulated_.recommended);
  storage_chart_->setComparison(c);
  plan_model_->setComparison(c, simulated_);
  plan_table_->resizeColumnsToContents();

  {
    const QSignalBlocker block(timeline_plan_box_);
    timeline_plan_box_->clear();
    for (const PlanResult& plan : c.plans) {
      QString label = QString::fromStdString(plan.choice.label());
      if (!plan.fits) label += tr(" (does not fit)");
      timeline_plan_box_->addItem(label);
    }
  }

  if (simulated_.recommended >= 0) {
    recommendation_label_->setText(tr("Recommended: %1, %2")
                                       .arg(QString::fromStdString(c.plans[simulated_.recommended].choice.label()),
                                            QString::fromStdString(simulated_.recommendation)));
  } else {
    recommendation_label_->setText(tr("No plan recommended: %1").arg(QString::fromStdString(simulated_.recommendation)));
  }
  if (!simulated_.problem.empty()) {
    recommendation_label_->setText(recommendation_label_->text() + tr(" | Some step times are missing: %1")
                                                                       .arg(QString::fromStdString(simulated_.problem)));
  }

  // Keep the user's choice; else the recommended plan, the DeepSpeed config's, the first that fits, the first.
  int index = -1;
  if (user_selected_choice_) index = c.index_of(*user_selected_choice_);
  if (index < 0) index = simulated_.recommended;
  if (index < 0 && c.configured_choice) index = c.index_of(*c.configured_choice);
  for (std::size_t i = 0; index < 0 && i < c.plans.size(); ++i) {
    if (c.plans[i].fits) index = static_cast<int>(i);
  }
  if (index < 0 && !c.plans.empty()) index = 0;
  selected_ = -1;
  selectPlan(index);
}

void MainWindow::selectPlan(int index) {
  if (!comparison_ || index < 0 || index >= static_cast<int>(comparison_->plans.size())) return;
  const bool changed = index != selected_;
  selected_ = index;
  updating_selection_ = true;
  timeline_plan_box_->setCurrentIndex(index);
  const QModelIndex proxy_index = plan_proxy_->mapFromSource(plan_model_->index(index, 0));
  plan_table_->selectionModel()->select(proxy_index,
                                        QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  plan_table_->selectionModel()->setCurrentIndex(proxy_index, QItemSelectionModel::NoUpdate);
  updating_selection_ = false;
  if (changed || timeline_->step().tasks.empty()) showTimeline();
}

void MainWindow::showTimeline() {
  try {
    timeline_->setStep(simulate_plan_step(*comparison_, selected_));
  } catch (const InputError& error) {
    timeline_->setMessage(tr("No timeline for %1: %2")
                              .arg(QString::fromStdString(comparison_->plans[selected_].choice.label()),
                                   QString::fromStdString(error.what())));
  }
}

void MainWindow::onTableSelection() {
  if (updating_selection_ || !comparison_) return;
  const QModelIndexList rows = plan_table_->selectionModel()->selectedRows();
  if (rows.isEmpty()) return;
  const int index = plan_proxy_->mapToSource(rows.front()).row();
  user_selected_choice_ = comparison_->plans[static_cast<std::size_t>(index)].choice;
  selectPlan(index);
}

void MainWindow::showTab(Tab tab) { tabs_->setCurrentIndex(static_cast<int>(tab)); }

bool MainWindow::openRunReport(const QString& path) {
  try {
    measured_view_->addReport(load_run_report(path.toStdString()));
  } catch (const InputError& error) {
    reporter_->report(tr("Cannot open the run report"), QString::fromStdString(error.what()));
    return false;
  }
  showTab(Tab::measured);
  return true;
}

void MainWindow::chooseRunReport() {
  const QStringList paths = QFileDialog::getOpenFileNames(this, tr("Open run reports"), QString(),
                                                          tr("Run reports (*.json);;All files (*)"));
  for (const QString& path : paths) openRunReport(path);
}

bool MainWindow::exportChartPng(const QString& path) {
  QWidget* source = memory_chart_;
  if (tabs_->currentIndex() == static_cast<int>(Tab::timeline)) source = timeline_;
  if (tabs_->currentIndex() == static_cast<int>(Tab::measured)) source = measured_view_;
  if (!source->grab().save(path, "PNG")) {
    reporter_->report(tr("Cannot export the chart"), tr("%1: cannot write a PNG file there").arg(path));
    return false;
  }
  statusBar()->showMessage(tr("Chart written to %1").arg(path), 5000);
  return true;
}

bool MainWindow::exportTableCsv(const QString& path) {
  QFile file(path);
  if (!comparison_ || !file.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) {
    reporter_->report(tr("Cannot export the table"), tr("%1: cannot write the file").arg(path));
    return false;
  }
  QTextStream out(&file);
  out << plan_model_->toCsv();
  out.flush();
  if (out.status() != QTextStream::Ok) {
    reporter_->report(tr("Cannot export the table"), tr("%1: write failed").arg(path));
    return false;
  }
  statusBar()->showMessage(tr("Table written to %1").arg(path), 5000);
  return true;
}

void MainWindow::chooseChartExport() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Export chart"), "zeroplan-chart.png",
                                                    tr("PNG images (*.png)"));
  if (!path.isEmpty()) exportChartPng(path);
}

void MainWindow::chooseTableExport() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Export table"), "zeroplan-plans.csv",
                                                    tr("CSV files (*.csv)"));
  if (!path.isEmpty()) exportTableCsv(path);
}

}  // namespace zeroplan
