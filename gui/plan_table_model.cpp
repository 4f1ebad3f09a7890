#include "gui/plan_table_model.h"

#include <QBrush>
#include <QFont>
#include <QLocale>

#include "core/units.h"
#include "gui/component_palette.h"
#include "gui/plan_tooltips.h"

namespace zeroplan {

namespace {

QString gib_text(const QVariant& value) {
  if (value.isNull()) return QString();
  return QString::number(to_gib(value.toLongLong()), 'f', 2);
}
QString gb_text(const QVariant& value) {
  if (value.isNull()) return QString();
  return QString::number(static_cast<double>(value.toLongLong()) / kGB, 'f', 2);
}
QString plain_text(const QVariant& value) { return value.toString(); }
QString count_text(const QVariant& value) {
  if (value.isNull()) return QString();
  return QLocale(QLocale::English).toString(value.toLongLong());
}
QString ms_text(const QVariant& value) {
  if (value.isNull()) return QString();
  return QString::number(value.toDouble() * 1e3, 'f', 1);
}
QString rate_text(const QVariant& value) {
  if (value.isNull()) return QString();
  return QLocale(QLocale::English).toString(value.toDouble(), 'f', 0);
}
QString percent_text(const QVariant& value) {
  if (value.isNull()) return QString();
  return QString::number(value.toDouble() * 100.0, 'f', 1);
}

Bytes collective_bytes(const PlanResult& plan, CollectiveKind kind) {
  Bytes total = 0;
  for (const CollectiveVolume& volume : plan.comm.collectives) {
    if (volume.kind == kind) total += volume.bytes;
  }
  return total;
}

QString collective_tooltip(const PlanResult& plan, CollectiveKind kind, int ranks) {
  QString text = QString("<b>%1</b> per GPU per step (%2)").arg(QString::fromStdString(to_string(kind)),
                                                                 QString::fromStdString(plan.choice.label()));
  bool any = false;
  for (const CollectiveVolume& volume : plan.comm.collectives) {
    if (volume.kind != kind) continue;
    any = true;
    text += QString("<br>&bull; %1: %2 calls, %3 elements, %4; on the wire %5 (ring factor %6, N = %7)")
                .arg(QString::fromStdString(volume.when).toHtmlEscaped())
                .arg(volume.calls)
                .arg(QLocale(QLocale::English).toString(static_cast<qlonglong>(volume.elements)))
                .arg(exact_bytes(volume.bytes), exact_bytes(volume.wire_bytes))
                .arg(ring_factor(kind, ranks), 0, 'f', 3)
                .arg(ranks);
  }
  if (!any) text += "<br>none in this plan";
  text += QString("<br><i>ZeRO paper sec. 7: %1 x P elements per step in all (before accumulation)</i>")
              .arg(plan.comm.multiple_of_params, 0, 'g', 3);
  return text;
}

}  // namespace

PlanTableModel::PlanTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void PlanTableModel::setComparison(const Comparison& comparison, const SimulatedPlans& simulated) {
  beginResetModel();
  plans_ = comparison.plans;
  timings_ = simulated.timings;
  timings_.resize(plans_.size());
  configured_ = comparison.configured_choice;
  recommended_ = simulated.recommended;
  ranks_ = comparison.cluster.total_gpus();
  counts_tokens_ = comparison.model.transformer.has_value();
  buildColumns();
  endResetModel();
}

void PlanTableModel::buildColumns() {
  columns_.clear();
  auto add = [this](QString key, QString header, QString tip, std::function<QVariant(std::size_t)> value,
                    std::function<QString(const QVariant&)> display,
                    std::function<QString(std::size_t)> tooltip = {}) {
    columns_.push_back(Column{std::move(key), std::move(header), std::move(tip), std::move(value),
                              std::move(display), std::move(tooltip)});
  };
  add("plan", tr("Plan"), tr("ZeRO stage and offload targets"),
      [this](std::size_t r) {
        QString label = QString::fromStdString(plans_[r].choice.label());
        if (configured_ && plans_[r].choice == *configured_) label += tr(" (your DeepSpeed config)");
        return QVariant(label);
      },
      plain_text);
  add("fits", tr("Verdict"), tr("Fits when GPU, host and NVMe memory are all within the capacity"),
      [this](std::size_t r) {
        const PlanResult& p = plans_[r];
        QString verdict = p.fits ? tr("fits") : tr("does not fit");
        if (!p.fits) {
          QStringList where;
          if (!p.gpu_fits) where << tr("GPU");
          if (!p.host_fits) where << tr("host");
          if (!p.nvme_fits) where << tr("NVMe");
          verdict += " (" + where.join(", ") + ")";
        }
        if (static_cast<int>(r) == recommended_) verdict += tr(", recommended");
        return QVariant(verdict);
      },
      plain_text);
  add("gpu_total_bytes", tr("GPU total\n(GiB)"), tr("Peak bytes per GPU, every component"),
      [this](std::size_t r) { return QVariant(static_cast<qlonglong>(plans_[r].memory.gpu.total)); }, gib_text,
      [this](std::size_t r) {
        return tr("<b>GPU total</b>: %1").arg(exact_bytes(plans_[r].memory.gpu.total));
      });
  add("gpu_headroom_bytes", tr("Headroom\n(GiB)"), tr("GPU capacity minus the total; negative when it does not fit"),
      [this](std::size_t r) { return QVariant(static_cast<qlonglong>(plans_[r].gpu_headroom_bytes)); }, gib_text,
      [this](std::size_t r) { return exact_bytes(plans_[r].gpu_headroom_bytes); });
  // The simulator's figures next, where they are seen without scrolling (when the simulator timed the plans).
  bool any_timing = false;
  for (const auto& timing : timings_) any_timing = any_timing || timing.has_value();
  if (any_timing) {
    auto timing_value = [this](auto field) {
      return [this, field](std::size_t r) -> QVariant {
        if (!timings_[r]) return QVariant();
        return QVariant(field(*timings_[r]));
      };
    };
    auto timing_tip = [this](std::size_t r) {
      if (!timings_[r]) return QString();
      const PlanTiming& t = *timings_[r];
      return tr("step %1 s: compute %2 s, communication %3 s of which exposed %4 s<br>MFU: %5")
          .arg(t.step_seconds, 0, 'g', 6)
          .arg(t.compute_seconds, 0, 'g', 6)
          .arg(t.comm_seconds, 0, 'g', 6)
          .arg(t.exposed_comm_seconds, 0, 'g', 6)
          .arg(QString::fromStdString(t.mfu_basis).toHtmlEscaped());
    };
    add("step_seconds", tr("Step\n(ms)"), tr("Predicted optimizer step time (simulated timeline)"),
        timing_value([](const PlanTiming& t) { return t.step_seconds; }), ms_text, timing_tip);
    add(counts_tokens_ ? "tokens_per_second" : "samples_per_second", counts_tokens_ ? tr("Tokens/s") : tr("Samples/s"),
        counts_tokens_ ? tr("Predicted tokens per second over all GPUs")
                       : tr("Predicted samples (images) per second over all GPUs"),
        timing_value([](const PlanTiming& t) { return t.tokens_per_second; }), rate_text, timing_tip);
    add("mfu", tr("MFU\n(%)"), tr("Model FLOP/s utilization (hover for the FLOP convention and the peak)"),
        timing_value([](const PlanTiming& t) { return t.mfu; }), percent_text, timing_tip);
    add("exposed_comm_seconds", tr("Exposed comm\n(ms)"),
        tr("Communication time not overlapped by compute: NCCL busy while the compute stream is idle"),
        timing_value([](const PlanTiming& t) { return t.exposed_comm_seconds; }), ms_text, timing_tip);
  }
  if (!plans_.empty()) {
    const auto components = plans_.front().memory.gpu.components();
    for (std::size_t k = 0; k < components.size(); ++k) {
      const std::string name = components[k].first;
      add(QString::fromStdString(name) + "_bytes", component_display_name(name) + "\n(GiB)",
          tr("GPU bytes of %1; hover a cell for its formula").arg(component_display_name(name)),
          [this, k](std::size_t r) {
            return QVariant(static_cast<qlonglong>(plans_[r].memory.gpu.components()[k].second));
          },
          gib_text, [this, name](std::size_t r) { return component_tooltip(plans_[r], name); });
    }
  }
  add("host_bytes", tr("Host/node\n(GiB)"), tr("Host memory per node (offloaded states, pinned buffers)"),
      [this](std::size_t r) { return QVariant(static_cast<qlonglong>(plans_[r].memory.host.total)); }, gib_text,
      [this](std::size_t r) { return component_tooltip(plans_[r], "host"); });
  add("nvme_bytes", tr("NVMe/node\n(GiB)"), tr("NVMe bytes per node (NVMe offload)"),
      [this](std::size_t r) { return QVariant(static_cast<qlonglong>(plans_[r].memory.nvme_bytes)); }, gib_text,
      [this](std::size_t r) { return component_tooltip(plans_[r], "nvme"); });
  for (CollectiveKind kind : {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter, CollectiveKind::all_gather}) {
    const QString name = QString::fromStdString(to_string(kind));
    add(name + "_bytes", name + tr("\n(GB/step)"),
        tr("%1 bytes per GPU per optimizer step (full buffer S, summed over calls; GB = 1e9 bytes)").arg(name),
        [this, kind](std::size_t r) { return QVariant(static_cast<qlonglong>(collective_bytes(plans_[r], kind))); },
        gb_text, [this, kind](std::size_t r) { return collective_tooltip(plans_[r], kind, ranks_); });
  }
  add("pcie_bytes", tr("PCIe\n(GB/step)"), tr("Host-to-device plus device-to-host bytes per GPU per step (offload)"),
      [this](std::size_t r) {
        return QVariant(static_cast<qlonglong>(plans_[r].comm.pcie_host_to_device_bytes +
                                               plans_[r].comm.pcie_device_to_host_bytes));
      },
      gb_text,
      [this](std::size_t r) {
        return tr("host to device %1<br>device to host %2<br><i>ZeRO-Offload: 16-bit gradients down, 16-bit "
                  "parameters up (4P bytes)</i>")
            .arg(exact_bytes(plans_[r].comm.pcie_host_to_device_bytes),
                 exact_bytes(plans_[r].comm.pcie_device_to_host_bytes));
      });
  add("max_micro_batch", tr("Max\nmicro-batch"), tr("Largest micro-batch that fits with everything else unchanged"),
      [this](std::size_t r) { return QVariant(static_cast<qlonglong>(plans_[r].max_micro_batch)); }, count_text);

}

int PlanTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(plans_.size());
}

int PlanTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(columns_.size());
}

QVariant PlanTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= columnCount()) return {};
  const std::size_t row = static_cast<std::size_t>(index.row());
  const Column& column = columns_[static_cast<std::size_t>(index.column())];
  switch (role) {
    case Qt::DisplayRole:
      return column.display(column.value(row));
    case Qt::UserRole:
      return column.value(row);
    case Qt::ToolTipRole:
      return column.tooltip ? QVariant(column.tooltip(row)) : QVariant();
    case Qt::TextAlignmentRole:
      return index.column() < 2 ? QVariant(Qt::AlignLeft | Qt::AlignVCenter)
                                : QVariant(Qt::AlignRight | Qt::AlignVCenter);
    case Qt::BackgroundRole:
      if (index.row() == recommended_) return QBrush(recommended_row_color());
      return {};
    case Qt::ForegroundRole:
      if (column.key == "fits" || column.key == "gpu_headroom_bytes") {
        return QBrush(plans_[row].fits ? fits_color() : does_not_fit_color());
      }
      return {};
    case Qt::FontRole:
      if (index.row() == recommended_) {
        QFont font;
        font.setBold(true);
        return font;
      }
      return {};
    default:
      return {};
  }
}

QVariant PlanTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= columnCount()) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  const Column& column = columns_[static_cast<std::size_t>(section)];
  if (role == Qt::DisplayRole) return column.header;
  if (role == Qt::ToolTipRole) return column.tip;
  if (role == Qt::UserRole) return column.key;
  return {};
}

int PlanTableModel::column(const QString& key) const {
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    if (columns_[i].key == key) return static_cast<int>(i);
  }
  return -1;
}

QString PlanTableModel::columnKey(int column) const {
  if (column < 0 || column >= columnCount()) return {};
  return columns_[static_cast<std::size_t>(column)].key;
}

QString PlanTableModel::toCsv() const {
  auto quote = [](QString text) {
    if (text.contains(',') || text.contains('"') || text.contains('\n')) {
      text.replace("\"", "\"\"");
      return "\"" + text + "\"";
    }
    return text;
  };
  QStringList lines;
  QStringList header;
  for (const Column& column : columns_) header << column.key;
  lines << header.join(',');
  for (std::size_t r = 0; r < plans_.size(); ++r) {
    QStringList cells;
    for (const Column& column : columns_) {
      const QVariant value = column.value(r);
      if (value.isNull()) {
        cells << QString();
      } else if (value.typeId() == QMetaType::Double) {
        cells << QString::number(value.toDouble(), 'g', 10);
      } else {
        cells << quote(value.toString());
      }
    }
    lines << cells.join(',');
  }
  return lines.join('\n') + '\n';
}

}  // namespace zeroplan
