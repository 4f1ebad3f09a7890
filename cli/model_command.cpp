#include "cli/model_command.h"

#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/common_options.h"
#include "cli/text_table.h"
#include "core/model_description.h"
#include "core/units.h"

namespace zeroplan {

namespace {

void print_model(const ModelDescription& model, OutputFormat format, bool list_all_layers) {
  if (format == OutputFormat::json) {
    std::cout << model_to_json(model).dump(2) << '\n';
    return;
  }
  TextTable table({"layer", "kind", "params", "largest module", "modules", "activation elements/sample"});
  // Transformer blocks are identical: show the first and the last unless --all-layers.
  const std::size_t count = model.layers.size();
  std::int64_t blocks = 0;
  for (const LayerDescription& layer : model.layers) blocks += layer.kind == "transformer_block";
  bool ellipsis_added = false;
  for (std::size_t i = 0; i < count; ++i) {
    const LayerDescription& layer = model.layers[i];
    const bool inner_block = layer.kind == "transformer_block" && i > 0 && i + 1 < count &&
                             model.layers[i - 1].kind == "transformer_block" &&
                             model.layers[i + 1].kind == "transformer_block";
    if (inner_block && !list_all_layers) {
      if (!ellipsis_added) {
        table.add_row({"... " + std::to_string(blocks - 2) + " more blocks like these", "", "", "", "", ""});
        ellipsis_added = true;
      }
      continue;
    }
    table.add_row({layer.name, layer.kind, format_integer(layer.params), format_integer(layer.largest_module_params),
                   std::to_string(layer.module_count),
                   layer.activation_elements_per_sample ? format_integer(layer.activation_elements_per_sample) : "-"});
  }
  if (format == OutputFormat::csv) {
    table.print_csv(std::cout);
    return;
  }
  const bool markdown = format == OutputFormat::markdown;
  std::cout << (markdown ? "**" : "") << model.name << (markdown ? "**" : "") << "  (" << model.source << ")\n\n";
  std::cout << "parameters:            " << format_integer(model.params()) << " (" << format_count(model.params())
            << ")\n";
  std::cout << "largest layer params:  " << format_integer(model.largest_layer_params())
            << "  (DeepSpeed's largest_layer_params: most parameters owned directly by one module)\n";
  if (model.transformer) {
    const TransformerShape& t = *model.transformer;
    std::cout << "shape:                 " << to_string(t.family) << ", vocab " << t.vocab_size << ", hidden "
              << t.hidden << ", layers " << t.layers << ", heads " << t.heads << " (kv " << t.kv_heads << "), ffn "
              << t.ffn_hidden << ", max seq " << t.max_seq << ", " << to_string(t.norm) << ", "
              << to_string(t.activation) << (t.tied_embeddings ? ", tied embeddings" : ", untied embeddings")
              << '\n';
  }
  if (!model.reference.empty()) std::cout << "reference:             " << model.reference << '\n';
  std::cout << '\n';
  if (markdown) table.print_markdown(std::cout);
  else table.print_text(std::cout);
}

}  // namespace

void add_model_command(CLI::App& app, int* status) {
  struct Options {
    std::string model;
    std::string format = "table";
    bool all_layers = false;
    bool list = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand("model", "Print a model description expanded: parameters, largest layer, "
                                                  "per-layer table");
  command->add_option("model", options->model, "Bundled model name, model description or HF config.json");
  command->add_flag("--list", options->list, "List the bundled models");
  command->add_flag("--all-layers", options->all_layers, "Show every transformer block, not only the first and last");
  command->add_option("--format,-f", options->format, "table, json, csv or markdown")->capture_default_str();
  command->callback([options, status] {
    const OutputFormat format = parse_output_format(options->format);
    if (options->list) {
      if (format == OutputFormat::json) {
        nlohmann::json list = nlohmann::json::array();
        for (const std::string& name : bundled_model_names()) {
          const ModelDescription model = load_model(name);
          list.push_back({{"name", name}, {"params", model.params()}, {"reference", model.reference}});
        }
        std::cout << list.dump(2) << '\n';
      } else {
        TextTable table({"model", "params", "reference"});
        for (const std::string& name : bundled_model_names()) {
          const ModelDescription model = load_model(name);
          table.add_row({name, format_integer(model.params()), model.reference});
        }
        if (format == OutputFormat::csv) table.print_csv(std::cout);
        else if (format == OutputFormat::markdown) table.print_markdown(std::cout);
        else table.print_text(std::cout);
      }
      *status = 0;
      return;
    }
    if (options->model.empty()) {
      throw CLI::ValidationError("model", "give a bundled model name or a file (zeroplan model --list lists them)");
    }
    print_model(load_model(options->model), format, options->all_layers);
    *status = 0;
  });
}

}  // namespace zeroplan
