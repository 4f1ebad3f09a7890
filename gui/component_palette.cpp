#include "gui/component_palette.h"

#include <map>

namespace zeroplan {

QString component_display_name(const std::string& component) {
  QString name = QString::fromStdString(component);
  name.replace('_', ' ');
  return name;
}

QString component_short_name(const std::string& component) {
  static const std::map<std::string, QString> names = {
      {"params", "params"},           {"grads", "grads"},
      {"master_params", "master"},    {"optimizer_states", "opt. states"},
      {"activations", "activations"}, {"logits", "logits"},
      {"gradient_buckets", "buckets"}, {"gathered_params", "gathered"},
      {"offload_buffers", "offload"},  {"runtime_overhead", "runtime"},
      {"workspace", "workspace"},      {"total", "total"},
  };
  auto it = names.find(component);
  return it == names.end() ? component_display_name(component) : it->second;
}

QColor component_color(const std::string& component) {
  // Model states in blues/greens (what ZeRO partitions), activations in purples, buffers in browns, overhead
  // in greys: the stacks read as "states | activations | buffers | overhead" from the bottom up.
  static const std::map<std::string, QColor> colors = {
      {"params", QColor(0x1f, 0x77, 0xb4)},           {"grads", QColor(0xff, 0x7f, 0x0e)},
      {"master_params", QColor(0x17, 0xbe, 0xcf)},    {"optimizer_states", QColor(0x2c, 0xa0, 0x2c)},
      {"activations", QColor(0x94, 0x67, 0xbd)},      {"logits", QColor(0xc5, 0xb0, 0xd5)},
      {"gradient_buckets", QColor(0x8c, 0x56, 0x4b)}, {"gathered_params", QColor(0xae, 0xc7, 0xe8)},
      {"offload_buffers", QColor(0xe3, 0x77, 0xc2)},  {"runtime_overhead", QColor(0x7f, 0x7f, 0x7f)},
  };
  auto it = colors.find(component);
  return it == colors.end() ? QColor(0xbc, 0xbd, 0x22) : it->second;
}

QColor report_color(std::size_t index) {
  // Tableau 10 in an order where neighbours contrast (red, blue, green, orange, ...).
  static const QColor colors[] = {
      QColor(0xd6, 0x27, 0x28), QColor(0x1f, 0x77, 0xb4), QColor(0x2c, 0xa0, 0x2c), QColor(0xff, 0x7f, 0x0e),
      QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b), QColor(0xe3, 0x77, 0xc2), QColor(0x7f, 0x7f, 0x7f),
      QColor(0xbc, 0xbd, 0x22), QColor(0x17, 0xbe, 0xcf),
  };
  return colors[index % (sizeof(colors) / sizeof(colors[0]))];
}

QColor capacity_line_color() { return QColor(0xd6, 0x27, 0x28); }
QColor fits_color() { return QColor(0x1a, 0x7f, 0x37); }
QColor does_not_fit_color() { return QColor(0xc0, 0x1c, 0x28); }
QColor recommended_row_color() { return QColor(0xd4, 0xed, 0xda); }


QColor task_color(TaskKind kind) {
  switch (kind) {
    case TaskKind::forward: return QColor(0x1f, 0x77, 0xb4);
    case TaskKind::recompute: return QColor(0x9e, 0xc9, 0xe9);
    case TaskKind::backward_input: return QColor(0xff, 0x7f, 0x0e);
    case TaskKind::backward_weight: return QColor(0xc4, 0x5c, 0x00);
    case TaskKind::optimizer_step: return QColor(0x2c, 0xa0, 0x2c);
    case TaskKind::all_reduce: return QColor(0xd6, 0x27, 0x28);
    case TaskKind::reduce_scatter: return QColor(0x94, 0x67, 0xbd);
    case TaskKind::all_gather: return QColor(0x8c, 0x56, 0x4b);
    case TaskKind::param_upload: return QColor(0xe3, 0x77, 0xc2);
    case TaskKind::grad_download: return QColor(0x7f, 0x7f, 0x7f);
    case TaskKind::param_download: return QColor(0xf7, 0xb6, 0xd2);  // the upload's pink, lighter
    case TaskKind::cpu_optimizer_step: return QColor(0xbc, 0xbd, 0x22);
    case TaskKind::nvme_read: return QColor(0x17, 0xbe, 0xcf);
    case TaskKind::nvme_write: return QColor(0x0e, 0x7c, 0x86);
    case TaskKind::engine_hooks: return QColor(0xb0, 0xb0, 0xb0);   // host time, not GPU work: grey
    case TaskKind::gradient_copy: return QColor(0xff, 0xbb, 0x78);  // the backward's orange, lighter
  }
  return QColor(0x40, 0x40, 0x40);
}

}  // namespace zeroplan
