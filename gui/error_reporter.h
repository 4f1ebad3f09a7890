// How the GUI tells a user that an input is wrong. The window holds an ErrorReporter; the application uses a
// message-box dialog, tests inject one that records the message (no modal dialog to block a headless run).
#pragma once

#include <QString>

class QWidget;

namespace zeroplan {

class ErrorReporter {
 public:
  virtual ~ErrorReporter() = default;
  // title: what was being done ("Cannot open the model"); message: the InputError's one line.
  virtual void report(const QString& title, const QString& message) = 0;
};

// A warning dialog over `parent` (QMessageBox::warning).
class DialogErrorReporter : public ErrorReporter {
 public:
  explicit DialogErrorReporter(QWidget* parent) : parent_(parent) {}
  void report(const QString& title, const QString& message) override;

 private:
  QWidget* parent_;
};

}  // namespace zeroplan
