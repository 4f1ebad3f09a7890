#include "gui/error_reporter.h"

#include <QMessageBox>

namespace zeroplan {

void DialogErrorReporter::report(const QString& title, const QString& message) {
  QMessageBox::warning(parent_, title, message);
}

}  // namespace zeroplan
