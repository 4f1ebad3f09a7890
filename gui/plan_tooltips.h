// Tooltip text for a plan's memory component: its bytes and every term of explain_memory() that makes it up,
// with the formula (numbers put in) and the formula's source. Shared by the chart and the table.
#pragma once

#include <string>

#include <QString>

#include "sim/planner.h"

namespace zeroplan {

// Rich text: "<b>optimizer states</b>: 8.70 GiB (9,345,667,200 bytes)<br>Adam momentum + variance: ...".
QString component_tooltip(const PlanResult& plan, const std::string& component);
// "9,345,667,200 bytes" with thousands separators.
QString exact_bytes(std::int64_t bytes);

}  // namespace zeroplan
