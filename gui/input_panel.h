// The input panel: model (bundled or a file: zeroplan description or Hugging Face config.json), cluster
// (bundled or a file), GPU count, DeepSpeed config, micro-batch, sequence length, gradient accumulation,
// precision, activation checkpointing, whose engine the memory model describes (DeepSpeed's or the zeroplan
// executor's) and, for DeepSpeed's, the training host's speed (bench/deepspeed/host_probe.py's figure). Every
// change emits inputsChanged at once; the window evaluates and either shows the result (showResolved) or reports
// the error and puts the previous state back.
#pragma once

#include <QSet>
#include <QWidget>

#include "gui/comparison.h"
#include "gui/gui_inputs.h"

class QComboBox;
class QDoubleSpinBox;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QLabel;

namespace zeroplan {

class InputPanel : public QWidget {
  Q_OBJECT

 public:
  explicit InputPanel(QWidget* parent = nullptr);

  // The inputs as the widgets show them, every value explicit.
  GuiInputs inputs() const;
  // Shows what a comparison resolved to (the DeepSpeed config's values, the model's sequence length, the
  // cluster's GPU count) without emitting inputsChanged. Also how the previous state is put back after an error.
  void showResolved(const Comparison& comparison);
  // Lines under the resolved inputs from the plans' simulations (sim/host_bound_note.h); empty: none.
  void showSimulationNote(const QString& note);

  // The widgets, for keyboard focus order and for tests.
  QComboBox* modelBox() const { return model_box_; }
  QComboBox* clusterBox() const { return cluster_box_; }
  QSpinBox* gpusBox() const { return gpus_box_; }
  QSpinBox* microBatchBox() const { return micro_batch_box_; }
  QSpinBox* seqBox() const { return seq_box_; }
  QSpinBox* gradAccumBox() const { return grad_accum_box_; }
  QComboBox* precisionBox() const { return precision_box_; }
  QComboBox* checkpointingBox() const { return checkpointing_box_; }
  QComboBox* engineBox() const { return engine_box_; }
  QDoubleSpinBox* hostSpeedBox() const { return host_speed_box_; }
  QLabel* summaryLabel() const { return summary_label_; }

 public slots:
  // Select a file as the model / cluster / DeepSpeed config (what the Open... buttons call after their dialog).
  void openModelFile(const QString& path);
  void openClusterFile(const QString& path);
  void openDeepSpeedConfig(const QString& path);
  void clearDeepSpeedConfig();
  // The file dialogs.
  void chooseModelFile();
  void chooseClusterFile();
  void chooseDeepSpeedConfig();

 signals:
  void inputsChanged(const zeroplan::GuiInputs& inputs);

 private:
  void emitModelChanged();
  void emitClusterChanged();
  void emitDeepSpeedChanged();
  void emitValueChanged();
  static int selectEntry(QComboBox* box, const QString& spec);

  QComboBox* model_box_ = nullptr;
  QComboBox* cluster_box_ = nullptr;
  QSpinBox* gpus_box_ = nullptr;
  QLineEdit* ds_config_edit_ = nullptr;
  QPushButton* ds_clear_button_ = nullptr;
  QSpinBox* micro_batch_box_ = nullptr;
  QSpinBox* seq_box_ = nullptr;
  QSpinBox* grad_accum_box_ = nullptr;
  QComboBox* precision_box_ = nullptr;
  QComboBox* checkpointing_box_ = nullptr;
  QComboBox* engine_box_ = nullptr;
  QDoubleSpinBox* host_speed_box_ = nullptr;  // microseconds per eager operation; 0: the cluster's host
  QLabel* summary_label_ = nullptr;
  QString summary_;  // what showResolved wrote; showSimulationNote adds to it
  QString ds_config_path_;  // empty: none
};

}  // namespace zeroplan
