#include "gui/timeline_chart.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <QAreaSeries>
#include <QCategoryAxis>
#include <QChart>
#include <QChartView>
#include <QCursor>
#include <QLabel>
#include <QLegendMarker>
#include <QLineSeries>
#include <QPen>
#include <QSplitter>
#include <QToolTip>
#include <QVBoxLayout>
#include <QValueAxis>

#include "core/units.h"
#include "gui/component_palette.h"

namespace zeroplan {

namespace {

QString resource_name(Resource resource) {
  switch (resource) {
    case Resource::gpu_compute: return QObject::tr("GPU compute");
    case Resource::nccl: return QObject::tr("NCCL");
    case Resource::host_to_device: return QObject::tr("copy host→GPU");
    case Resource::device_to_host: return QObject::tr("copy GPU→host");
    case Resource::host_cpu: return QObject::tr("host CPU");
    case Resource::nvme: return QObject::tr("NVMe");
    case Resource::host_python: return QObject::tr("host (DeepSpeed hooks)");
  }
  return QString::fromStdString(to_string(resource));
}

QString kind_name(TaskKind kind) {
  QString name = QString::fromStdString(to_string(kind));
  name.replace('_', ' ');
  return name;
}

void clear_chart(QChart* chart) {
  chart->removeAllSeries();
  for (QAbstractAxis* axis : chart->axes()) {
    chart->removeAxis(axis);
    delete axis;
  }
}

}  // namespace

TimelineChart::TimelineChart(QWidget* parent) : QWidget(parent) {
  gantt_view_ = new QChartView(this);
  memory_view_ = new QChartView(this);
  for (QChartView* view : {gantt_view_, memory_view_}) {
    view->setRenderHint(QPainter::Antialiasing);
    view->chart()->setAnimationOptions(QChart::NoAnimation);
    view->chart()->legend()->setAlignment(Qt::AlignBottom);  // legends below: the right edges stay equal
    view->setMinimumSize(300, 140);
    connect(view->chart(), &QChart::plotAreaChanged, this, &TimelineChart::alignPlotAreas);
  }
  base_left_margin_ = gantt_view_->chart()->margins().left();
  message_ = new QLabel(this);
  message_->setWordWrap(true);
  message_->hide();
  auto* splitter = new QSplitter(Qt::Vertical, this);
  splitter->addWidget(gantt_view_);
  splitter->addWidget(memory_view_);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 2);
  splitter->setChildrenCollapsible(false);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(message_);
  layout->addWidget(splitter, 1);
}

void TimelineChart::setMessage(const QString& message) {
  step_ = PlanStep{};
  clear_chart(gantt_view_->chart());
  clear_chart(memory_view_->chart());
  memory_curve_ = nullptr;
  message_->setText(message);
  message_->setVisible(!message.isEmpty());
}

// The two charts share the time axis: the one whose left axis is narrower (lane names vs GiB numbers) gets a
// wider left margin so both plot areas start at the same x. Converges in one more layout pass.
void TimelineChart::alignPlotAreas() {
  QChart* charts[2] = {gantt_view_->chart(), memory_view_->chart()};
  double natural[2];
  for (int i = 0; i < 2; ++i) {
    natural[i] = charts[i]->plotArea().left() - (charts[i]->margins().left() - base_left_margin_);
  }
  const double target = std::max(natural[0], natural[1]);
  for (int i = 0; i < 2; ++i) {
    QMargins margins = charts[i]->margins();
    const int left = base_left_margin_ + static_cast<int>(std::lround(target - natural[i]));
    if (margins.left() != left) {
      margins.setLeft(left);
      charts[i]->setMargins(margins);
    }
  }
}

void TimelineChart::setStep(const PlanStep& step) {
  step_ = step;
  message_->hide();
  QChart* gantt = gantt_view_->chart();
  QChart* memory = memory_view_->chart();
  clear_chart(gantt);
  clear_chart(memory);
  const double step_ms = std::max(step.step_seconds, 1e-12) * 1e3;

  // Lanes: the resources that have tasks, compute at the top.
  std::vector<Resource> lanes;
  for (int r = 0; r < kResourceCount; ++r) {
    const auto resource = static_cast<Resource>(r);
    if (std::any_of(step.tasks.begin(), step.tasks.end(), [&](const TimelineTask& t) { return t.resource == resource; })) {
      lanes.push_back(resource);
    }
  }
  auto lane_bottom = [&](Resource resource) {
    const auto it = std::find(lanes.begin(), lanes.end(), resource);
    return static_cast<double>(lanes.end() - it - 1) + 0.15;  // first lane on top
  };
  auto* time_axis = new QValueAxis();
  time_axis->setRange(0.0, step_ms);
  time_axis->setTitleText(tr("time in the step (ms)"));
  time_axis->setLabelFormat("%.0f");
  time_axis->applyNiceNumbers();
  gantt->addAxis(time_axis, Qt::AlignBottom);
  auto* lane_axis = new QCategoryAxis();
  lane_axis->setRange(0.0, static_cast<double>(std::max<std::size_t>(lanes.size(), 1)));
  lane_axis->setLabelsPosition(QCategoryAxis::AxisLabelsPositionCenter);
  lane_axis->setGridLineVisible(false);
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    lane_axis->append(resource_name(lanes[lanes.size() - 1 - i]), static_cast<double>(i + 1));
  }
  gantt->addAxis(lane_axis, Qt::AlignLeft);

  // One area series per (resource, kind): each task a rectangle [start, finish] x [lane, lane + 0.7]; between
  // tasks the outline runs along the lane's floor, which the lower line shares, so it encloses nothing.
  std::map<std::pair<int, int>, std::vector<const TimelineTask*>> groups;
  for (const TimelineTask& task : step.tasks) {
    groups[{static_cast<int>(task.resource), static_cast<int>(task.kind)}].push_back(&task);
  }
  std::map<int, bool> kind_in_legend;
  for (const auto& [key, tasks] : groups) {
    const auto resource = static_cast<Resource>(key.first);
    const auto kind = static_cast<TaskKind>(key.second);
    const double y0 = lane_bottom(resource), y1 = y0 + 0.7;
    auto* upper = new QLineSeries();
    auto* lower = new QLineSeries();
    QList<QPointF> points;
    points.reserve(static_cast<qsizetype>(tasks.size() * 4));
    for (const TimelineTask* task : tasks) {
      // At least a hair wide so the shortest tasks still show at a normal window width.
      const double start = task->start * 1e3;
      const double finish = std::max(task->finish * 1e3, start + step_ms * 1e-4);
      points << QPointF(start, y0) << QPointF(start, y1) << QPointF(finish, y1) << QPointF(finish, y0);
    }
    upper->append(points);
    lower->append(points.front().x(), y0);
    lower->append(points.back().x(), y0);
    auto* area = new QAreaSeries(upper, lower);
    area->setName(kind_name(kind));
    area->setColor(task_color(kind));
    area->setPen(Qt::NoPen);
    gantt->addSeries(area);
    area->attachAxis(time_axis);
    area->attachAxis(lane_axis);
    const bool first_of_kind = !kind_in_legend[key.second];
    kind_in_legend[key.second] = true;
    if (!first_of_kind) {
      for (QLegendMarker* marker : gantt->legend()->markers(area)) marker->setVisible(false);
    }
    connect(area, &QAreaSeries::hovered, this, [this, r = key.first](const QPointF& point, bool state) {
      showTaskTooltip(r, point, state);
    });
  }
  gantt->setTitle(tr("Simulated step: %1, %2 per step").arg(QString::fromStdString(step.label),
                                                             QString::fromStdString(format_seconds(step.step_seconds))));

  // The memory curve: a step function of the bytes in use, with the capacity.
  memory_curve_ = new QLineSeries();
  memory_curve_->setName(tr("GPU memory in use"));
  QPen curve_pen(QColor(0x33, 0x33, 0x99));
  curve_pen.setWidth(2);
  memory_curve_->setPen(curve_pen);
  double previous = 0.0, highest = 0.0;
  bool first = true;
  for (const auto& [time, bytes] : step.memory_curve) {
    const double gib = to_gib(bytes);
    if (!first) memory_curve_->append(time * 1e3, previous);
    memory_curve_->append(time * 1e3, gib);
    previous = gib;
    first = false;
    highest = std::max(highest, gib);
  }
  if (!step.memory_curve.empty()) memory_curve_->append(step_ms, previous);
  memory->addSeries(memory_curve_);
  auto* capacity = new QLineSeries();
  capacity->setName(tr("GPU capacity (%1)").arg(QString::fromStdString(format_gib(step.gpu_capacity_bytes))));
  QPen capacity_pen(capacity_line_color());
  capacity_pen.setWidth(2);
  capacity_pen.setStyle(Qt::DashLine);
  capacity->setPen(capacity_pen);
  capacity->append(0.0, to_gib(step.gpu_capacity_bytes));
  capacity->append(step_ms, to_gib(step.gpu_capacity_bytes));
  // The capacity line only when it is near the curve: far above, it would flatten the curve to a line, so the
  // title names the capacity instead.
  const double capacity_gib = to_gib(step.gpu_capacity_bytes);
  const bool show_capacity = capacity_gib <= highest * 1.6;
  if (show_capacity) {
    memory->addSeries(capacity);
  } else {
    delete capacity;
    capacity = nullptr;
  }
  auto* memory_time = new QValueAxis();
  memory_time->setRange(0.0, step_ms);
  memory_time->setTitleText(tr("time in the step (ms)"));
  memory_time->setLabelFormat("%.0f");
  memory_time->applyNiceNumbers();  // the same range as the Gantt chart's: same input, same nice numbers
  memory->addAxis(memory_time, Qt::AlignBottom);
  auto* memory_axis = new QValueAxis();
  memory_axis->setTitleText(tr("GiB"));
  memory_axis->setLabelFormat("%.0f");
  memory_axis->setRange(0.0, std::max(highest, show_capacity ? capacity_gib : 0.0) * 1.08);
  memory_axis->applyNiceNumbers();
  memory->addAxis(memory_axis, Qt::AlignLeft);
  for (QLineSeries* series : {memory_curve_, capacity}) {
    if (!series) continue;
    series->attachAxis(memory_time);
    series->attachAxis(memory_axis);
  }
  memory->setTitle(tr("GPU memory over the step: peak %1 of %2 capacity")
                       .arg(QString::fromStdString(format_gib(step.peak_memory_bytes)),
                            QString::fromStdString(format_gib(step.gpu_capacity_bytes))));
  alignPlotAreas();
}

void TimelineChart::showTaskTooltip(int resource, const QPointF& point, bool state) {
  if (!state) {
    QToolTip::hideText();
    return;
  }
  const double t = point.x() / 1e3;
  for (const TimelineTask& task : step_.tasks) {
    if (static_cast<int>(task.resource) != resource || t < task.start || t > task.finish) continue;
    QString text = QString("<b>%1</b>").arg(kind_name(task.kind));
    if (task.layer >= 0) text += tr(", layer %1").arg(task.layer);
    text += tr(", micro-step %1<br>%2 → %3 (%4)")
                .arg(task.micro_step)
                .arg(QString::fromStdString(format_seconds(task.start)),
                     QString::fromStdString(format_seconds(task.finish)),
                     QString::fromStdString(format_seconds(task.finish - task.start)));
    if (task.bytes > 0) text += tr("<br>%1 moved").arg(QString::fromStdString(format_bytes(task.bytes)));
    if (task.flops > 0) text += tr("<br>%1 FLOPs").arg(QString::fromStdString(format_count(task.flops)));
    QToolTip::showText(QCursor::pos(), text, this);
    return;
  }
}

}  // namespace zeroplan
