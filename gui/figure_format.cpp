#include "gui/figure_format.h"

#include <cmath>

#include <QLocale>

namespace zeroplan {

namespace {

QLocale english() { return QLocale(QLocale::English); }

}  // namespace

MemoryUnit memory_unit_for(Bytes largest) {
  if (largest >= kGiB) return {QStringLiteral("GiB"), static_cast<double>(kGiB)};
  if (largest >= kMiB) return {QStringLiteral("MiB"), static_cast<double>(kMiB)};
  return {QStringLiteral("KiB"), static_cast<double>(kKiB)};
}

QString memory_text(Bytes bytes, const MemoryUnit& unit) {
  return english().toString(static_cast<double>(bytes) / unit.bytes, 'f', 3);
}

QString bytes_text(Bytes bytes) { return english().toString(static_cast<qlonglong>(bytes)); }

QString milliseconds_text(double seconds) { return english().toString(seconds * 1e3, 'f', 3); }

QString error_text(double predicted, double measured) {
  if (measured == 0.0) return predicted == 0.0 ? QStringLiteral("0.0%") : QStringLiteral("n/a (measured 0)");
  const double percent = (predicted - measured) / measured * 100.0;
  if (percent == 0.0) return QStringLiteral("0.0%");
  return QString("%1%2%").arg(percent > 0.0 ? "+" : "").arg(percent, 0, 'f', std::abs(percent) < 0.1 ? 3 : 1);
}

}  // namespace zeroplan
