// One colour and one display name per memory component (sim/memory_model.h GpuMemoryBreakdown names) and one
// colour per simulator task kind, used by every chart and legend so a thing looks the same everywhere.
#pragma once

#include <cstddef>
#include <string>

#include <QColor>
#include <QString>

#include "sim/timeline.h"

namespace zeroplan {

// "optimizer_states" -> "optimizer states"
QString component_display_name(const std::string& component);
// A short name for a chart's category axis, where room is tight ("optimizer_states" -> "opt. states",
// "master_params" -> "master"); the full name stays in tooltips and tables. Unknown names: the display name.
QString component_short_name(const std::string& component);
// A fixed colour per known component; an unknown name gets a neutral olive (and is still shown, named).
QColor component_color(const std::string& component);

// Compute in blues/oranges, collectives in reds and purples, copies in pinks/greys, host work in olive, NVMe in
// teal.
QColor task_color(TaskKind kind);

// One colour per run report shown together (the loss curves, the list's swatches), distinct for the first ten
// and then repeating.
QColor report_color(std::size_t index);

QColor capacity_line_color();
QColor fits_color();
QColor does_not_fit_color();
QColor recommended_row_color();

}  // namespace zeroplan
