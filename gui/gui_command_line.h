// zeroplan-gui's command line: the CLI's input flags (--model, --cluster, --gpus, --micro-batch, --seq,
// --grad-accum, --precision, --checkpointing, --ds-config, --engine; --stage/--offload-optimizer/--offload-param select
// the plan shown in the timeline), --report FILE (run reports, repeatable), and --screenshot FILE with --tab
// and --size to render the window to a PNG without interaction.
#pragma once

#include <optional>

#include <QSize>
#include <QString>
#include <QStringList>

#include "gui/gui_inputs.h"
#include "gui/main_window.h"
#include "sim/plan_choice.h"

namespace zeroplan {

struct GuiCommandLine {
  GuiInputs inputs;
  std::optional<PlanChoice> plan;   // --stage and offloads: the plan to select
  QStringList reports;              // --report FILE...
  QString screenshot;               // --screenshot FILE (empty: interactive)
  MainWindow::Tab tab = MainWindow::Tab::comparison;
  QSize size{1600, 1000};           // --size WxH for the screenshot (and the window)
};

// Parses the arguments (without Qt's own, which QApplication has taken). --help and --version print and
// return nullopt with *exit_code 0; a bad flag or value throws InputError naming it.
std::optional<GuiCommandLine> parse_gui_command_line(const QStringList& arguments, int* exit_code);

}  // namespace zeroplan
