#include "gui/screenshot.h"

#include <QApplication>
#include <QImageWriter>
#include <QPixmap>
#include <QWidget>

#include "core/input_error.h"

namespace zeroplan {

void write_screenshot(QWidget& window, const QSize& size, const QString& path) {
  window.resize(size);
  window.show();
  // Layouts settle over a few passes (charts re-layout when their geometry changes); no timers are involved, so
  // a bounded number of event-loop passes is enough and never waits.
  for (int pass = 0; pass < 8; ++pass) QApplication::processEvents();
  const QPixmap pixmap = window.grab();
  QImageWriter writer(path, "png");
  if (!writer.write(pixmap.toImage())) {
    throw InputError(path.toStdString(), "--screenshot", "cannot write the PNG: " + writer.errorString().toStdString());
  }
}

}  // namespace zeroplan
