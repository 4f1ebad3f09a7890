// zeroplan-gui: the desktop view. With --screenshot FILE it renders the window to a PNG and exits (0), so
// the README's images and the tests need no interaction. Bad input on the command line: one line, exit 2,
// as the CLI does.
#include <QApplication>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "core/input_error.h"
#include "gui/gui_command_line.h"
#include "gui/main_window.h"
#include "gui/error_reporter.h"
#include "gui/screenshot.h"

namespace {

// While the command line is applied, an error is an input error of the command line: remembered, then printed
// as one line with exit status 2 (no dialog, so --screenshot never waits for a click).
class CommandLineErrorReporter : public zeroplan::ErrorReporter {
 public:
  void report(const QString&, const QString& message) override { message_ = message; }
  const QString& message() const { return message_; }

 private:
  QString message_;
};

int command_line_error(const QString& message) {
  std::fprintf(stderr, "zeroplan-gui: %s\n", message.toLocal8Bit().constData());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("zeroplan-gui");
  QApplication::setApplicationVersion("0.1.0");
  try {
    int exit_code = 0;
    const auto command_line = zeroplan::parse_gui_command_line(QApplication::arguments(), &exit_code);
    if (!command_line) return exit_code;
    zeroplan::GuiInputs inputs = command_line->inputs;
    if (inputs.model.empty()) {
      // A bundled model to start from, shown in the model box like any other choice.
      const auto names = zeroplan::bundled_model_names();
      if (names.empty()) throw zeroplan::InputError("command line", "--model", "no bundled models found: give one");
      const bool has_default = std::find(names.begin(), names.end(), "gpt2-1.5b") != names.end();
      inputs.model = has_default ? "gpt2-1.5b" : names.front();
    }

    zeroplan::MainWindow window;
    auto reporter = std::make_unique<CommandLineErrorReporter>();
    const CommandLineErrorReporter* errors = reporter.get();
    window.setErrorReporter(std::move(reporter));
    if (!window.applyInputs(inputs)) return command_line_error(errors->message());
    if (command_line->plan) window.selectPlan(window.comparison()->index_of(*command_line->plan));
    for (const QString& report : command_line->reports) {
      if (!window.openRunReport(report)) return command_line_error(errors->message());
    }
    window.setErrorReporter(std::make_unique<zeroplan::DialogErrorReporter>(&window));
    window.showTab(command_line->tab);
    if (!command_line->screenshot.isEmpty()) {
      zeroplan::write_screenshot(window, command_line->size, command_line->screenshot);
      return 0;
    }
    window.resize(command_line->size);
    window.show();
    return QApplication::exec();
  } catch (const zeroplan::InputError& error) {
    std::fprintf(stderr, "zeroplan-gui: %s\n", error.what());
    return 2;
  }
}
