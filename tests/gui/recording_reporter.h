// Records what the error dialog would have said, so nothing modal blocks a headless test.
#pragma once

#include <QStringList>

#include "gui/error_reporter.h"

namespace zeroplan {

class RecordingReporter : public ErrorReporter {
 public:
  explicit RecordingReporter(QStringList* messages) : messages_(messages) {}
  void report(const QString&, const QString& message) override { messages_->append(message); }

 private:
  QStringList* messages_;
};

}  // namespace zeroplan
