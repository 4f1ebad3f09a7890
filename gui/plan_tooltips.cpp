#include "gui/plan_tooltips.h"

#include <QLocale>

#include "core/units.h"
#include "gui/component_palette.h"

namespace zeroplan {

QString exact_bytes(std::int64_t bytes) {
  return QLocale(QLocale::English).toString(static_cast<qlonglong>(bytes)) + " bytes";
}

QString component_tooltip(const PlanResult& plan, const std::string& component) {
  Bytes bytes = 0;
  for (const auto& [name, value] : plan.memory.gpu.components()) {
    if (name == component) bytes = value;
  }
  if (component == "host") bytes = plan.memory.host.total;
  if (component == "nvme") bytes = plan.memory.nvme_bytes;
  QString text = QString("<b>%1</b> (%2): %3 = %4")
                     .arg(component_display_name(component).toHtmlEscaped(),
                          QString::fromStdString(plan.choice.label()).toHtmlEscaped(),
                          QString::fromStdString(format_gib(bytes)), exact_bytes(bytes));
  for (const MemoryTerm& term : plan.memory.terms) {
    if (term.component != component) continue;
    text += QString("<br>&bull; %1: %2<br>&nbsp;&nbsp;<tt>%3</tt><br>&nbsp;&nbsp;<i>%4</i>")
                .arg(QString::fromStdString(term.name).toHtmlEscaped(),
                     QString::fromStdString(format_bytes(term.bytes)),
                     QString::fromStdString(term.formula).toHtmlEscaped(),
                     QString::fromStdString(term.source).toHtmlEscaped());
  }
  return text;
}

}  // namespace zeroplan
