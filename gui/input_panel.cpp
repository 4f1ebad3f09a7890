#include "gui/input_panel.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>

#include "core/units.h"

namespace zeroplan {

namespace {

constexpr int kMaxSpin = 1 << 24;

QSpinBox* make_spin(int minimum, int maximum, QWidget* parent) {
  auto* box = new QSpinBox(parent);
  box->setRange(minimum, maximum);
  box->setAccelerated(true);
  box->setGroupSeparatorShown(true);
  return box;
}

QPushButton* make_open_button(const QString& tip, QWidget* parent) {
  auto* button = new QPushButton(QObject::tr("Open…"), parent);
  button->setToolTip(tip);
  button->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Fixed);
  return button;
}

QWidget* row(QWidget* main, QWidget* side, QWidget* parent) {
  auto* holder = new QWidget(parent);
  auto* layout = new QHBoxLayout(holder);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(main, 1);
  layout->addWidget(side);
  return holder;
}

}  // namespace

InputPanel::InputPanel(QWidget* parent) : QWidget(parent) {
  model_box_ = new QComboBox(this);
  model_box_->setToolTip(tr("A bundled model description, or a file opened with Open…"));
  for (const std::string& name : bundled_model_names()) {
    model_box_->addItem(QString::fromStdString(name), QString::fromStdString(name));
  }
  auto* model_open = make_open_button(tr("Open a zeroplan model description or a Hugging Face config.json"), this);

  cluster_box_ = new QComboBox(this);
  cluster_box_->setToolTip(tr("A bundled cluster description, or a file opened with Open…"));
  for (const std::string& name : bundled_cluster_names()) {
    cluster_box_->addItem(QString::fromStdString(name), QString::fromStdString(name));
  }
  auto* cluster_open = make_open_button(tr("Open a cluster description (.json)"), this);

  gpus_box_ = make_spin(1, kMaxSpin, this);
  gpus_box_->setToolTip(tr("GPUs of the cluster's kind: the data-parallel degree N"));

  ds_config_edit_ = new QLineEdit(this);
  ds_config_edit_->setReadOnly(true);
  ds_config_edit_->setPlaceholderText(tr("none"));
  auto* ds_open = make_open_button(tr("Open a DeepSpeed config (// comments and \"auto\" accepted)"), this);
  ds_clear_button_ = new QPushButton(tr("Clear"), this);
  ds_clear_button_->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Fixed);
  ds_clear_button_->setEnabled(false);
  auto* ds_buttons = new QWidget(this);
  auto* ds_layout = new QHBoxLayout(ds_buttons);
  ds_layout->setContentsMargins(0, 0, 0, 0);
  ds_layout->addWidget(ds_open);
  ds_layout->addWidget(ds_clear_button_);

  micro_batch_box_ = make_spin(1, kMaxSpin, this);
  micro_batch_box_->setToolTip(tr("Samples per GPU per micro-step"));
  seq_box_ = make_spin(1, kMaxSpin, this);
  seq_box_->setToolTip(tr("Tokens per sample (the model's maximum when a model is chosen)"));
  grad_accum_box_ = make_spin(1, kMaxSpin, this);
  grad_accum_box_->setToolTip(tr("Micro-steps per optimizer step"));
  precision_box_ = new QComboBox(this);
  for (Precision p : {Precision::bf16, Precision::fp16, Precision::fp32}) {
    precision_box_->addItem(QString::fromStdString(to_string(p)), static_cast<int>(p));
  }
  precision_box_->setToolTip(tr("bf16 or fp16 (mixed precision with fp32 master weights), or fp32"));
  checkpointing_box_ = new QComboBox(this);
  for (Checkpointing c : {Checkpointing::none, Checkpointing::selective, Checkpointing::full}) {
    checkpointing_box_->addItem(QString::fromStdString(to_string(c)), static_cast<int>(c));
  }
  checkpointing_box_->setToolTip(tr("Activation checkpointing: none, selective (attention recomputed) or full"));
  engine_box_ = new QComboBox(this);
  engine_box_->addItem(tr("DeepSpeed"), static_cast<int>(TrainingEngine::deepspeed));
  engine_box_->addItem(tr("zeroplan executor"), static_cast<int>(TrainingEngine::zeroplan));
  engine_box_->addItem(tr("ideal (ZeRO paper)"), static_cast<int>(TrainingEngine::ideal));
  engine_box_->setToolTip(tr("Whose training engine the memory model describes: DeepSpeed's, the zeroplan "
                             "executor's (what zeroplan run executes and predicts with), or an ideal engine on the "
                             "ZeRO paper's schedule (zeroplan plan --engine ideal)"));
  // The probe's figure in microseconds (it prints seconds; an H200 host reads 5-12 us). 0 keeps the host the
  // cluster's DeepSpeed costs were measured on; the box is off where that host is not named (showResolved).
  host_speed_box_ = new QDoubleSpinBox(this);
  host_speed_box_->setRange(0.0, 1000.0);
  host_speed_box_->setDecimals(2);
  host_speed_box_->setSingleStep(0.5);
  host_speed_box_->setSuffix(tr(" us per eager op"));
  host_speed_box_->setSpecialValueText(tr("the cluster's host"));
  host_speed_box_->setToolTip(tr("DeepSpeed engine: the training host's time per small eager CUDA operation, as "
                                 "python3 bench/deepspeed/host_probe.py measures it. Stage 3's per-call host costs "
                                 "are scaled from the host the cluster's costs hold on (zeroplan plan "
                                 "--host-op-seconds)"));

  auto* model_group = new QGroupBox(tr("Model and cluster"), this);
  auto* model_form = new QFormLayout(model_group);
  model_form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  model_form->addRow(tr("&Model"), row(model_box_, model_open, model_group));
  model_form->addRow(tr("C&luster"), row(cluster_box_, cluster_open, model_group));
  model_form->addRow(tr("&GPUs"), gpus_box_);
  model_form->addRow(tr("&DeepSpeed config"), ds_config_edit_);
  model_form->addRow(QString(), ds_buttons);

  auto* training_group = new QGroupBox(tr("Training"), this);
  auto* training_form = new QFormLayout(training_group);
  training_form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  training_form->addRow(tr("Micro-&batch"), micro_batch_box_);
  training_form->addRow(tr("&Sequence length"), seq_box_);
  training_form->addRow(tr("Gradient &accumulation"), grad_accum_box_);
  training_form->addRow(tr("&Precision"), precision_box_);
  training_form->addRow(tr("&Checkpointing"), checkpointing_box_);
  training_form->addRow(tr("&Engine"), engine_box_);
  training_form->addRow(tr("&Host speed"), host_speed_box_);

  summary_label_ = new QLabel(this);
  summary_label_->setWordWrap(true);
  summary_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  summary_label_->setAlignment(Qt::AlignTop | Qt::AlignLeft);

  auto* layout = new QVBoxLayout(this);
  layout->addWidget(model_group);
  layout->addWidget(training_group);
  layout->addWidget(summary_label_);
  layout->addStretch(1);

  connect(model_box_, &QComboBox::currentIndexChanged, this, &InputPanel::emitModelChanged);
  connect(cluster_box_, &QComboBox::currentIndexChanged, this, &InputPanel::emitClusterChanged);
  connect(gpus_box_, &QSpinBox::valueChanged, this, &InputPanel::emitValueChanged);
  connect(micro_batch_box_, &QSpinBox::valueChanged, this, &InputPanel::emitValueChanged);
  connect(seq_box_, &QSpinBox::valueChanged, this, &InputPanel::emitValueChanged);
  connect(grad_accum_box_, &QSpinBox::valueChanged, this, &InputPanel::emitValueChanged);
  connect(precision_box_, &QComboBox::currentIndexChanged, this, &InputPanel::emitValueChanged);
  connect(checkpointing_box_, &QComboBox::currentIndexChanged, this, &InputPanel::emitValueChanged);
  connect(engine_box_, &QComboBox::currentIndexChanged, this, &InputPanel::emitValueChanged);
  connect(host_speed_box_, &QDoubleSpinBox::valueChanged, this, &InputPanel::emitValueChanged);
  connect(model_open, &QPushButton::clicked, this, &InputPanel::chooseModelFile);
  connect(cluster_open, &QPushButton::clicked, this, &InputPanel::chooseClusterFile);
  connect(ds_open, &QPushButton::clicked, this, &InputPanel::chooseDeepSpeedConfig);
  connect(ds_clear_button_, &QPushButton::clicked, this, &InputPanel::clearDeepSpeedConfig);
}

GuiInputs InputPanel::inputs() const {
  GuiInputs in;
  in.model = model_box_->currentData().toString().toStdString();
  in.cluster = cluster_box_->currentData().toString().toStdString();
  in.gpus = gpus_box_->value();
  if (!ds_config_path_.isEmpty()) in.ds_config = ds_config_path_.toStdString();
  in.micro_batch = micro_batch_box_->value();
  if (seq_box_->isEnabled()) in.seq = seq_box_->value();
  in.grad_accum = grad_accum_box_->value();
  in.precision = static_cast<Precision>(precision_box_->currentData().toInt());
  in.checkpointing = static_cast<Checkpointing>(checkpointing_box_->currentData().toInt());
  in.engine = static_cast<TrainingEngine>(engine_box_->currentData().toInt());
  // Kept only while DeepSpeed's engine is chosen (a switch to another engine drops it, as the box turns off).
  if (host_speed_box_->isEnabled() && host_speed_box_->value() > 0.0 && in.engine == TrainingEngine::deepspeed)
    in.host_op_seconds = host_speed_box_->value() * 1e-6;
  return in;
}

// A changed model starts from its own maximum sequence length (as the CLI does without --seq).
void InputPanel::emitModelChanged() {
  GuiInputs in = inputs();
  in.seq.reset();
  emit inputsChanged(in);
}

// A changed cluster starts from its own GPU count (as the CLI does without --gpus).
void InputPanel::emitClusterChanged() {
  GuiInputs in = inputs();
  in.gpus.reset();
  emit inputsChanged(in);
}

// A newly opened DeepSpeed config sets the training values it names; the panel then shows them.
void InputPanel::emitDeepSpeedChanged() {
  GuiInputs in = inputs();
  if (in.ds_config) {
    in.micro_batch.reset();
    in.grad_accum.reset();
    in.precision.reset();
    in.checkpointing.reset();
  }
  emit inputsChanged(in);
}

void InputPanel::emitValueChanged() { emit inputsChanged(inputs()); }

int InputPanel::selectEntry(QComboBox* box, const QString& spec) {
  int index = box->findData(spec);
  if (index < 0) {
    box->addItem(QFileInfo(spec).fileName(), spec);
    index = box->count() - 1;
    box->setItemData(index, spec, Qt::ToolTipRole);
  }
  box->setCurrentIndex(index);
  return index;
}

void InputPanel::openModelFile(const QString& path) {
  const int before = model_box_->currentIndex();
  const int index = selectEntry(model_box_, path);
  if (index == before) emitModelChanged();  // re-opening the same file reloads it
}

void InputPanel::openClusterFile(const QString& path) {
  const int before = cluster_box_->currentIndex();
  const int index = selectEntry(cluster_box_, path);
  if (index == before) emitClusterChanged();
}

void InputPanel::openDeepSpeedConfig(const QString& path) {
  ds_config_path_ = path;
  ds_config_edit_->setText(QFileInfo(path).fileName());
  ds_config_edit_->setToolTip(path);
  emitDeepSpeedChanged();
}

void InputPanel::clearDeepSpeedConfig() {
  ds_config_path_.clear();
  ds_config_edit_->clear();
  emitDeepSpeedChanged();
}

void InputPanel::chooseModelFile() {
  const QString path = QFileDialog::getOpenFileName(
      this, tr("Open a model description"), QString(),
      tr("Model descriptions and Hugging Face configs (*.json);;All files (*)"));
  if (!path.isEmpty()) openModelFile(path);
}

void InputPanel::chooseClusterFile() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a cluster description"), QString(),
                                                    tr("Cluster descriptions (*.json);;All files (*)"));
  if (!path.isEmpty()) openClusterFile(path);
}

void InputPanel::chooseDeepSpeedConfig() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a DeepSpeed config"), QString(),
                                                    tr("DeepSpeed configs (*.json);;All files (*)"));
  if (!path.isEmpty()) openDeepSpeedConfig(path);
}

void InputPanel::showResolved(const Comparison& comparison) {
  const QSignalBlocker block_model(model_box_), block_cluster(cluster_box_), block_gpus(gpus_box_),
      block_micro(micro_batch_box_), block_seq(seq_box_), block_accum(grad_accum_box_),
      block_precision(precision_box_), block_checkpointing(checkpointing_box_), block_engine(engine_box_),
      block_host_speed(host_speed_box_);

  // Files that failed to load leave no entry behind: keep bundled names and the file now shown.
  const QString model_spec = QString::fromStdString(comparison.inputs.model);
  const QString cluster_spec = QString::fromStdString(comparison.inputs.cluster);
  for (int i = model_box_->count() - 1; i >= 0; --i) {
    const QString spec = model_box_->itemData(i).toString();
    if (spec != model_spec && spec != model_box_->itemText(i)) model_box_->removeItem(i);
  }
  for (int i = cluster_box_->count() - 1; i >= 0; --i) {
    const QString spec = cluster_box_->itemData(i).toString();
    if (spec != cluster_spec && spec != cluster_box_->itemText(i)) cluster_box_->removeItem(i);
  }
  selectEntry(model_box_, model_spec);
  selectEntry(cluster_box_, cluster_spec);

  gpus_box_->setValue(comparison.cluster.total_gpus());
  ds_config_path_ = comparison.inputs.ds_config ? QString::fromStdString(*comparison.inputs.ds_config) : QString();
  ds_config_edit_->setText(ds_config_path_.isEmpty() ? QString() : QFileInfo(ds_config_path_).fileName());
  ds_config_edit_->setToolTip(ds_config_path_);
  ds_clear_button_->setEnabled(!ds_config_path_.isEmpty());

  const TrainingConfig& training = comparison.training;
  micro_batch_box_->setValue(static_cast<int>(std::min<std::int64_t>(training.micro_batch, kMaxSpin)));
  const auto& transformer = comparison.model.transformer;
  seq_box_->setEnabled(transformer.has_value());
  seq_box_->setMaximum(transformer && transformer->learned_positions
                           ? static_cast<int>(std::min<std::int64_t>(transformer->max_seq, kMaxSpin))
                           : kMaxSpin);
  seq_box_->setValue(static_cast<int>(std::min<std::int64_t>(training.seq_len, kMaxSpin)));
  grad_accum_box_->setValue(static_cast<int>(std::min<std::int64_t>(training.grad_accum, kMaxSpin)));
  precision_box_->setCurrentIndex(precision_box_->findData(static_cast<int>(training.precision)));
  checkpointing_box_->setCurrentIndex(checkpointing_box_->findData(static_cast<int>(training.checkpointing)));
  engine_box_->setCurrentIndex(engine_box_->findData(static_cast<int>(training.engine)));
  // Only DeepSpeed's engine has host costs to scale, and only from a cluster that names their host.
  const double reference = comparison.cluster.cost_host_eager_op_seconds();  // at this world size
  const bool scalable = training.engine == TrainingEngine::deepspeed && reference > 0.0;
  host_speed_box_->setEnabled(scalable);
  host_speed_box_->setValue(scalable ? training.host_eager_op_seconds * 1e6 : 0.0);
  host_speed_box_->setToolTip(
      scalable ? tr("DeepSpeed engine: the training host's time per small eager CUDA operation, as python3 "
                    "bench/deepspeed/host_probe.py measures it; %1's costs hold on a host that reads %2 us at this GPU "
                    "count. Stage 3's per-call host costs are scaled by the ratio (zeroplan plan --host-op-seconds)")
                     .arg(QString::fromStdString(comparison.cluster.name).toHtmlEscaped())
                     .arg(reference * 1e6, 0, 'f', 2)
               : training.engine != TrainingEngine::deepspeed
                     ? tr("Only DeepSpeed's engine is timed with host costs; the zeroplan executor and the ideal "
                          "engine have none to scale")
                     : tr("Cluster %1 names no host its DeepSpeed costs hold on at this GPU count "
                          "(host.eager_op_seconds, multi_rank_eager_op_seconds), so there is nothing to scale from")
                           .arg(QString::fromStdString(comparison.cluster.name).toHtmlEscaped()));

  // What the inputs resolved to, and everything that was assumed or resolved on the way (never silent).
  QString summary = tr("<b>%1</b>: %2 parameters (largest layer %3)<br><b>%4</b>: %5 x %6, %7 each")
                        .arg(QString::fromStdString(comparison.model.name).toHtmlEscaped(),
                             QString::fromStdString(format_count(static_cast<double>(comparison.model.params()))),
                             QString::fromStdString(
                                 format_count(static_cast<double>(comparison.model.largest_layer_params()))),
                             QString::fromStdString(comparison.cluster.name).toHtmlEscaped())
                        .arg(comparison.cluster.total_gpus())
                        .arg(QString::fromStdString(comparison.cluster.gpu_model).toHtmlEscaped(),
                             QString::fromStdString(format_gib(comparison.cluster.gpu_memory_bytes)));
  for (const std::string& note : training.notes) {
    summary += "<br>" + QString::fromStdString(note).toHtmlEscaped();
  }
  for (const std::string& warning : training.warnings) {
    summary += "<br><span style='color:#c01c28'>" + tr("warning: ") +
               QString::fromStdString(warning).toHtmlEscaped() + "</span>";
  }
  summary_ = summary;
  summary_label_->setText(summary);
}

void InputPanel::showSimulationNote(const QString& note) {
  summary_label_->setText(note.isEmpty() ? summary_ : summary_ + "<br><b>" + note.toHtmlEscaped() + "</b>");
}

}  // namespace zeroplan
