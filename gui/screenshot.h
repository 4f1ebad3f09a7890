// Screenshot mode: render a window to a PNG without user interaction (zeroplan-gui --screenshot FILE), for
// the README and for tests that look at the result. Works on the offscreen platform and under Xvfb.
#pragma once

#include <QSize>
#include <QString>

class QWidget;

namespace zeroplan {

// Resizes and shows `window`, lets layouts and charts settle, and writes it to `path` as PNG. Throws InputError
// naming the file when it cannot be written.
void write_screenshot(QWidget& window, const QSize& size, const QString& path);

}  // namespace zeroplan
