// The measured-vs-predicted tab on two real run reports (zeroplan run --report on an H200: gpt2-1.5b for 20
// steps, gpt2-124m on text for 300; copies of bench/exec/results/ under tests/gui/data/): every figure in the
// table is the JSON's, read here independently with nlohmann/json, and the reports carry distinct labels in the
// list, the table's headers and the loss legend, with distinct colours that match between legend and curve.
#include <QBarCategoryAxis>
#include <QChart>
#include <QFile>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QListWidget>
#include <QSet>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QValueAxis>
#include <QtTest>

#include <cmath>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "gui/measured_view.h"
#include "gui/run_report.h"

using namespace zeroplan;
using nlohmann::json;

namespace {

const QString kData = QStringLiteral(ZEROPLAN_GUI_TEST_DATA);
const QString k15b = kData + "/gpt2-1.5b-report.json";
const QString k124m = kData + "/gpt2-124m-text-report.json";

json read_json(const QString& path) {
  std::ifstream in(path.toStdString());
  return json::parse(in);
}

std::optional<double> number_at(const json& object, const char* key) {
  if (!object.contains(key)) return std::nullopt;
  return object.at(key).get<double>();
}

// The percentage an error cell shows, as a number ("+3.7%" -> 3.7).
double shown_percent(const QString& text) {
  QString number = text;
  number.remove('%');
  bool ok = false;
  const double value = number.toDouble(&ok);
  if (!ok) qFatal("error cell '%s' is not a percentage", qPrintable(text));
  return value;
}

}  // namespace

class MeasuredViewTest : public QObject {
  Q_OBJECT

 private:
  // The three cells of report k in the row keyed `key`.
  static QTableWidgetItem* cell(const MeasuredView& view, const char* key, int k, int side) {
    const int row = view.tableRow(key);
    if (row < 0) return nullptr;
    return view.table()->item(row, 3 * k + side);
  }

  // Report k's column triple shows this document's figures, exactly.
  static void expectFigures(const MeasuredView& view, int k, const json& document) {
    const json& plan = document.at("plans").at(0);
    const json& predicted = plan.at("gpu_bytes");
    const json& measured = document.at("measured");
    const json& measured_bytes = measured.at("gpu_bytes");
    auto check_bytes = [&](const std::string& name, const std::optional<qlonglong>& p, const std::optional<qlonglong>& m) {
      QTableWidgetItem* p_cell = cell(view, name.c_str(), k, 0);
      QTableWidgetItem* m_cell = cell(view, name.c_str(), k, 1);
      QVERIFY2(p_cell && m_cell, name.c_str());
      // Each memory row writes its figures in the unit its header names.
      const QString header = view.table()->verticalHeaderItem(view.tableRow(QString::fromStdString(name)))->text();
      const double unit = header.endsWith("(GiB)")   ? 1024.0 * 1024.0 * 1024.0
                          : header.endsWith("(MiB)") ? 1024.0 * 1024.0
                          : header.endsWith("(KiB)") ? 1024.0
                                                     : 0.0;
      QVERIFY2(unit > 0.0, qPrintable(header));
      const QLocale english(QLocale::English);
      if (p) {
        QCOMPARE(p_cell->data(Qt::UserRole).toLongLong(), *p);
        QCOMPARE(p_cell->text(), english.toString(static_cast<double>(*p) / unit, 'f', 3));
      } else {
        QCOMPARE(p_cell->text(), QString("not predicted"));
      }
      if (m) {
        QCOMPARE(m_cell->data(Qt::UserRole).toLongLong(), *m);
        QCOMPARE(m_cell->text(), english.toString(static_cast<double>(*m) / unit, 'f', 3));
      } else {
        QCOMPARE(m_cell->text(), QString("not measured"));
      }
      if (p && m) {
        const double percent = (static_cast<double>(*p) - static_cast<double>(*m)) / static_cast<double>(*m) * 100.0;
        const QString error = cell(view, name.c_str(), k, 2)->text();
        QVERIFY2(std::abs(shown_percent(error) - percent) <= 0.05 + 1e-9, qPrintable(QString::fromStdString(name) + ": " + error));
      }
    };
    // Every component either side has, except those predicted as 0 and not measured (rows left out).
    int components = 0;
    for (auto it = predicted.begin(); it != predicted.end(); ++it) {
      if (it.key() == "total") continue;
      const bool is_measured = measured_bytes.contains(it.key());
      if (it.value().get<qlonglong>() == 0 && !is_measured) {
        QCOMPARE(view.tableRow(QString::fromStdString(it.key())), -1);
        continue;
      }
      check_bytes(it.key(), it.value().get<qlonglong>(),
                  is_measured ? std::optional<qlonglong>(measured_bytes.at(it.key()).get<qlonglong>()) : std::nullopt);
      ++components;
    }
    for (auto it = measured_bytes.begin(); it != measured_bytes.end(); ++it) {
      if (predicted.contains(it.key())) continue;  // done above
      check_bytes(it.key(), std::nullopt, it.value().get<qlonglong>());  // "workspace": measured only
      ++components;
    }
    QVERIFY(components >= 8);
    // The measured total: gpu_bytes.total where the run wrote one, else the device's own peak (cudaMemGetInfo).
    const qlonglong measured_total = measured_bytes.contains("total") ? measured_bytes.at("total").get<qlonglong>()
                                                                      : measured.at("device_used_peak_bytes").get<qlonglong>();
    check_bytes("total", predicted.at("total").get<qlonglong>(), measured_total);

    // Step time and tokens/s: the plan's prediction where it has one, else the simulator's recorded by the run.
    const std::optional<double> step_p = plan.contains("step_seconds") ? number_at(plan, "step_seconds")
                                                                       : number_at(measured, "predicted_step_seconds");
    const std::optional<double> rate_p = plan.contains("tokens_per_second")
                                             ? number_at(plan, "tokens_per_second")
                                             : number_at(measured, "predicted_tokens_per_second");
    QVERIFY(step_p && rate_p);
    const double step_m = measured.at("step_seconds").get<double>();
    const double rate_m = measured.at("tokens_per_second").get<double>();
    for (const char* key : {"step_seconds", "tokens_per_second"}) QVERIFY2(view.tableRow(key) >= 0, key);
    QCOMPARE(cell(view, "step_seconds", k, 0)->data(Qt::UserRole).toDouble(), *step_p);
    QCOMPARE(cell(view, "step_seconds", k, 1)->data(Qt::UserRole).toDouble(), step_m);
    QCOMPARE(cell(view, "step_seconds", k, 0)->text(), QLocale(QLocale::English).toString(*step_p * 1e3, 'f', 3));
    QCOMPARE(cell(view, "step_seconds", k, 1)->text(), QLocale(QLocale::English).toString(step_m * 1e3, 'f', 3));
    QVERIFY(std::abs(shown_percent(cell(view, "step_seconds", k, 2)->text()) - (*step_p - step_m) / step_m * 100.0) <= 0.05);
    QCOMPARE(cell(view, "tokens_per_second", k, 0)->data(Qt::UserRole).toDouble(), *rate_p);
    QCOMPARE(cell(view, "tokens_per_second", k, 1)->data(Qt::UserRole).toDouble(), rate_m);
    QCOMPARE(cell(view, "tokens_per_second", k, 1)->text(), QLocale(QLocale::English).toString(rate_m, 'f', 0));
  }

  // Labels distinct and the same in the list, the table's headers and the loss legend; curve colours distinct
  // and each legend marker in its curve's colour.
  static void expectLabels(const MeasuredView& view, const QStringList& expected) {
    QStringList labels;
    for (const std::string& label : view.labels()) labels << QString::fromStdString(label);
    QCOMPARE(labels, expected);
    QCOMPARE(QSet<QString>(labels.begin(), labels.end()).size(), labels.size());
    QCOMPARE(view.list()->count(), labels.size());
    QCOMPARE(view.table()->columnCount(), 3 * static_cast<int>(labels.size()));
    QSet<QString> headers;
    for (int k = 0; k < labels.size(); ++k) {
      // The list and the headers stack "model (file)" on two lines.
      QCOMPARE(view.list()->item(k)->text().replace('\n', ' '), labels[k]);
      QVERIFY(view.list()->item(k)->toolTip().contains(QString::fromStdString(view.reports()[k].source)));
      for (int side = 0; side < 3; ++side) {
        QString header = view.table()->horizontalHeaderItem(3 * k + side)->text();
        header.replace('\n', ' ');
        QVERIFY2(header.startsWith(labels[k] + " "), qPrintable(header));
        headers.insert(header);
      }
    }
    QCOMPARE(headers.size(), 3 * labels.size());

    QList<QLineSeries*> curves;
    for (QAbstractSeries* series : view.lossChart()->series()) curves << qobject_cast<QLineSeries*>(series);
    QCOMPARE(curves.size(), labels.size());
    QSet<QRgb> colours;
    for (int k = 0; k < curves.size(); ++k) {
      QVERIFY(curves[k]);
      QCOMPARE(curves[k]->name(), labels[k]);
      QCOMPARE(curves[k]->count(), static_cast<int>(view.reports()[k].loss.size()));
      colours.insert(curves[k]->color().rgb());
      const QList<QLegendMarker*> markers = view.lossChart()->legend()->markers(curves[k]);
      QCOMPARE(markers.size(), 1);
      QCOMPARE(markers.front()->label(), labels[k]);
      QCOMPARE(markers.front()->brush().color().rgb(), curves[k]->color().rgb());
    }
    QCOMPARE(colours.size(), curves.size());
    const auto x_axes = view.lossChart()->axes(Qt::Horizontal);
    QCOMPARE(x_axes.size(), 1);
    QCOMPARE(x_axes.front()->titleText(), QString("step"));
  }

 private slots:
  void tableShowsTheReportsFigures() {
    MeasuredView view;
    view.addReport(load_run_report(k15b.toStdString()));
    view.addReport(load_run_report(k124m.toStdString()));
    expectFigures(view, 0, read_json(k15b));
    if (QTest::currentTestFailed()) return;
    expectFigures(view, 1, read_json(k124m));
    if (QTest::currentTestFailed()) return;
  }

  void reportsHaveDistinctLabelsEverywhere() {
    MeasuredView view;
    view.addReport(load_run_report(k15b.toStdString()));
    view.addReport(load_run_report(k124m.toStdString()));
    // Both reports are "stage 0"; their models tell them apart.
    QCOMPARE(QString::fromStdString(view.reports()[0].plan_label), QString::fromStdString(view.reports()[1].plan_label));
    expectLabels(view, {"gpt2-1.5b", "gpt2-124m"});
    if (QTest::currentTestFailed()) return;

    // The selected report's bars: short component names, level, nothing left for the axis to elide.
    const auto vertical = view.componentsChart()->axes(Qt::Vertical);
    QCOMPARE(vertical.size(), 1);
    auto* names = qobject_cast<QBarCategoryAxis*>(vertical.front());
    QVERIFY(names);
    QCOMPARE(names->labelsAngle(), 0);
    // Qt draws category 0 at the bottom: the list runs bottom-up so the chart reads top-down in the table's order.
    QCOMPARE(names->categories(), QStringList({"total", "runtime", "logits", "activations", "opt. states", "master",
                                               "grads", "params"}));
    QVERIFY(view.componentsChart()->title().contains("gpt2-124m"));

    // A second report of the same model: the file names join the labels of both, everywhere.
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString rerun = dir.filePath("gpt2-1.5b-rerun.json");
    QVERIFY(QFile::copy(k15b, rerun));
    view.addReport(load_run_report(rerun.toStdString()));
    expectLabels(view, {"gpt2-1.5b (gpt2-1.5b-report.json)", "gpt2-124m", "gpt2-1.5b (gpt2-1.5b-rerun.json)"});
    if (QTest::currentTestFailed()) return;
    expectFigures(view, 2, read_json(k15b));
    if (QTest::currentTestFailed()) return;

    // The same file twice: numbered.
    view.addReport(load_run_report(k124m.toStdString()));
    expectLabels(view, {"gpt2-1.5b (gpt2-1.5b-report.json)", "gpt2-124m (" + k124m + ")",
                        "gpt2-1.5b (gpt2-1.5b-rerun.json)", "gpt2-124m (" + k124m + ") #2"});
    if (QTest::currentTestFailed()) return;

    // Removing reports gives the short labels back.
    view.removeSelected();
    view.list()->setCurrentRow(2);
    view.removeSelected();
    expectLabels(view, {"gpt2-1.5b", "gpt2-124m"});
    if (QTest::currentTestFailed()) return;
    expectFigures(view, 0, read_json(k15b));
    if (QTest::currentTestFailed()) return;
    expectFigures(view, 1, read_json(k124m));
    if (QTest::currentTestFailed()) return;
  }
};

QTEST_MAIN(MeasuredViewTest)
#include "measured_view_test.moc"
