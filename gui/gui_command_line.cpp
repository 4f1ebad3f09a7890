#include "gui/gui_command_line.h"

#include <QCommandLineParser>
#include <QRegularExpression>

#include <cstdio>

#include "core/input_error.h"

namespace zeroplan {

namespace {

constexpr const char* kCommandLine = "command line";

std::int64_t positive(const QCommandLineParser& parser, const QString& name) {
  bool ok = false;
  const qlonglong value = parser.value(name).toLongLong(&ok);
  if (!ok || value < 1) {
    throw InputError(kCommandLine, "--" + name.toStdString(),
                     "expected a positive integer, got '" + parser.value(name).toStdString() + "'");
  }
  return value;
}

}  // namespace

std::optional<GuiCommandLine> parse_gui_command_line(const QStringList& arguments, int* exit_code) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "zeroplan-gui: compare ZeRO stages and offload choices side by side (memory, communication, step time)");
  parser.setSingleDashWordOptionMode(QCommandLineParser::ParseAsLongOptions);
  const QCommandLineOption help({"h", "help"}, "Show this help.");
  parser.addOption(help);
  const QList<QCommandLineOption> options = {
      {{"m", "model"}, "Bundled model name, a zeroplan model description or a Hugging Face config.json.", "NAME|FILE"},
      {{"c", "cluster"}, "Bundled cluster name or a cluster description file.", "NAME|FILE"},
      {{"n", "gpus"}, "Number of GPUs of the cluster's kind (data-parallel degree).", "N"},
      {{"b", "micro-batch"}, "Samples per GPU per micro-step.", "N"},
      {{"s", "seq"}, "Sequence length in tokens (default: the model's maximum).", "N"},
      {"grad-accum", "Gradient accumulation micro-steps per optimizer step.", "N"},
      {"precision", "fp32, fp16 or bf16.", "P"},
      {"checkpointing", "Activation checkpointing: none, selective or full.", "C"},
      {"ds-config", "A DeepSpeed config file; flags given beside it win.", "FILE"},
      {"engine", "Whose engine the memory model describes: deepspeed (default) or zeroplan (what zeroplan run "
                 "executes).", "E"},
      {"host-op-seconds", "DeepSpeed engine: the training host's seconds per small eager CUDA operation, as "
                          "bench/deepspeed/host_probe.py measures it (default: the cluster's own host).", "SECONDS"},
      {"stage", "Select this ZeRO stage's plan (0-3) for the timeline.", "S"},
      {"offload-optimizer", "With --stage: the selected plan's optimizer offload (none, cpu, nvme).", "D"},
      {"offload-param", "With --stage 3: the selected plan's parameter offload (none, cpu, nvme).", "D"},
      {"report", "A run report from zeroplan run --report (repeat for several).", "FILE"},
      {"screenshot", "Render the window to this PNG file and exit (no interaction).", "FILE"},
      {"tab", "The tab shown: comparison, timeline or measured.", "TAB"},
      {"size", "Window size for --screenshot, WIDTHxHEIGHT (default 1600x1000).", "WxH"},
  };
  for (const QCommandLineOption& option : options) parser.addOption(option);

  if (!parser.parse(arguments)) {
    throw InputError(kCommandLine, "", parser.errorText().toStdString() + " (see zeroplan-gui --help)");
  }
  if (parser.isSet(help)) {
    std::fputs(parser.helpText().toLocal8Bit().constData(), stdout);
    *exit_code = 0;
    return std::nullopt;
  }
  if (!parser.positionalArguments().isEmpty()) {
    throw InputError(kCommandLine, parser.positionalArguments().front().toStdString(),
                     "unexpected argument: every input is a --flag (see zeroplan-gui --help)");
  }

  GuiCommandLine out;
  GuiInputs& in = out.inputs;
  if (parser.isSet("model")) in.model = parser.value("model").toStdString();
  if (parser.isSet("cluster")) in.cluster = parser.value("cluster").toStdString();
  if (parser.isSet("gpus")) in.gpus = static_cast<int>(positive(parser, "gpus"));
  if (parser.isSet("micro-batch")) in.micro_batch = positive(parser, "micro-batch");
  if (parser.isSet("seq")) in.seq = positive(parser, "seq");
  if (parser.isSet("grad-accum")) in.grad_accum = positive(parser, "grad-accum");
  if (parser.isSet("precision")) {
    in.precision = parse_precision(parser.value("precision").toStdString(), kCommandLine, "--precision");
  }
  if (parser.isSet("checkpointing")) {
    in.checkpointing =
        parse_checkpointing(parser.value("checkpointing").toStdString(), kCommandLine, "--checkpointing");
  }
  if (parser.isSet("ds-config")) in.ds_config = parser.value("ds-config").toStdString();
  if (parser.isSet("engine")) in.engine = parse_engine(parser.value("engine").toStdString(), kCommandLine, "--engine");
  if (parser.isSet("host-op-seconds")) {
    bool ok = false;
    const double seconds = parser.value("host-op-seconds").toDouble(&ok);
    if (!ok) {
      throw InputError(kCommandLine, "--host-op-seconds",
                       "'" + parser.value("host-op-seconds").toStdString() + "' is not a number of seconds");
    }
    require_host_op_seconds(seconds, kCommandLine, "--host-op-seconds");
    in.host_op_seconds = seconds;
  }

  if (parser.isSet("stage")) {
    const QString stage = parser.value("stage");
    if (stage.size() != 1 || stage[0] < '0' || stage[0] > '3') {
      throw InputError(kCommandLine, "--stage", "unknown ZeRO stage '" + stage.toStdString() + "': expected 0-3");
    }
    PlanChoice choice;
    choice.stage = stage[0].unicode() - '0';
    if (parser.isSet("offload-optimizer")) {
      choice.offload_optimizer =
          parse_offload_device(parser.value("offload-optimizer").toStdString(), kCommandLine, "--offload-optimizer");
    }
    if (parser.isSet("offload-param")) {
      choice.offload_param =
          parse_offload_device(parser.value("offload-param").toStdString(), kCommandLine, "--offload-param");
    }
    const auto valid = enumerate_plan_choices();
    if (std::find(valid.begin(), valid.end(), choice) == valid.end()) {
      throw InputError(kCommandLine, "--stage/--offload-*",
                       "no plan '" + choice.label() + "' (parameter offload needs stage 3 and optimizer offload; "
                       "optimizer offload needs stage 1-3)");
    }
    out.plan = choice;
  } else if (parser.isSet("offload-optimizer") || parser.isSet("offload-param")) {
    throw InputError(kCommandLine, "--offload-optimizer/--offload-param", "select a plan with --stage as well");
  }

  out.reports = parser.values("report");
  out.screenshot = parser.value("screenshot");
  if (parser.isSet("tab")) {
    const QString tab = parser.value("tab");
    if (tab == "comparison") out.tab = MainWindow::Tab::comparison;
    else if (tab == "timeline") out.tab = MainWindow::Tab::timeline;
    else if (tab == "measured") out.tab = MainWindow::Tab::measured;
    else throw InputError(kCommandLine, "--tab", "unknown tab '" + tab.toStdString() + "': expected comparison, timeline or measured");
  }
  if (parser.isSet("size")) {
    const QRegularExpressionMatch match =
        QRegularExpression("^([0-9]{2,5})x([0-9]{2,5})$").match(parser.value("size"));
    if (!match.hasMatch()) {
      throw InputError(kCommandLine, "--size", "expected WIDTHxHEIGHT in pixels, e.g. 1600x1000, got '" +
                                                   parser.value("size").toStdString() + "'");
    }
    out.size = QSize(match.captured(1).toInt(), match.captured(2).toInt());
    if (out.size.width() < 320 || out.size.height() < 240) {
      throw InputError(kCommandLine, "--size", "at least 320x240 pixels");
    }
  }
  return out;
}

}  // namespace zeroplan
