#include "fuzz/parser_inputs.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <tuple>
#include <sstream>
#include <utility>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli/common_options.h"
#include "core/cluster_description.h"
#include "core/deepspeed_config.h"
#include "core/hf_config_import.h"
#include "core/input_error.h"
#include "core/json_input.h"
#include "core/model_description.h"
#include "exec/token_data.h"
#include "gui/run_report.h"
#include "run/checkpoint.h"

namespace zeroplan::fuzz {

namespace {

// The name errors give the file, as if the user had passed it on the command line.
constexpr const char* kSource = "fuzz-input.json";

void require(bool holds, const std::string& what) {
  if (!holds) throw InvariantBroken(what);
}

// A feed that reads one file several ways (models, world sizes, vocabularies): each refusal is a clean answer; the
// file counts as refused (its first InputError rethrown) only when no way read it.
class Refusals {
 public:
  void add(const InputError& error) {
    if (!first_) first_ = error;
  }
  void accepted() { accepted_ = true; }
  void rethrow_if_all_refused() const {
    if (!accepted_ && first_) throw *first_;
  }

 private:
  std::optional<InputError> first_;
  bool accepted_ = false;
};

// Files for the parsers that only read paths (token files, the CLI's --model/--cluster/--ds-config): one folder per
// process, so parallel fuzzing jobs never read each other's input; removed when the process ends normally.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "zeroplan-fuzz-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("cannot create a scratch directory from " + pattern + ": " + std::strerror(errno));
    }
    path_ = pattern;
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Writes bytes to NAME in the folder and returns its path.
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::filesystem::path path = path_ / name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(errno));
    return path.string();
  }

 private:
  std::filesystem::path path_;
};

const ScratchDirectory& scratch() {
  static const ScratchDirectory directory;  // a folder name, removed at exit; no handle is held
  return directory;
}

// --- model descriptions (--model FILE): load_model's dispatch on the parsed document ---

// What `zeroplan model --format json` writes must read back as the same model (model_to_json's promise).
// An InputError while reading back what the writer wrote is the writer's (or the reader's) bug, not bad input.
template <typename Read>
auto read_back(const char* what, Read read) {
  try {
    return read();
  } catch (const InputError& error) {
    throw InvariantBroken(std::string(what) + " refused what it wrote: " + error.what());
  }
}

void check_model_round_trip(const ModelDescription& model) {
  const ModelDescription again =
      read_back("model_to_json -> model_from_json", [&] { return model_from_json(model_to_json(model), kSource); });
  require(again.params() == model.params(), "model_to_json -> model_from_json changed the parameter count");
  require(again.layers.size() == model.layers.size(), "model_to_json -> model_from_json changed the layer count");
  require(again.largest_layer_params() == model.largest_layer_params(),
          "model_to_json -> model_from_json changed the largest layer");
}

void feed_model_description(std::string_view bytes) {
  // load_model: comments allowed; a Hugging Face config.json is told apart by its keys.
  const nlohmann::json document = parse_json_text(std::string(bytes), kSource, /*allow_comments=*/true);
  const ModelDescription model =
      is_hf_config(document) ? model_from_hf_config(document, kSource) : model_from_json(document, kSource);
  check_model_round_trip(model);
}

void feed_hf_config(std::string_view bytes) {
  const nlohmann::json document = parse_json_text(std::string(bytes), kSource, /*allow_comments=*/true);
  // Called whatever is_hf_config says: the importer must refuse anything it cannot read, not trust the dispatch.
  const ModelDescription model = model_from_hf_config(document, kSource);
  check_model_round_trip(model);
}

// --- cluster descriptions (--cluster FILE) ---

void feed_cluster_description(std::string_view bytes) {
  const nlohmann::json document = parse_json_text(std::string(bytes), kSource, /*allow_comments=*/true);
  const ClusterDescription cluster = cluster_from_json(document, kSource);
  const ClusterDescription again = read_back("cluster_to_json -> cluster_from_json",
                                             [&] { return cluster_from_json(cluster_to_json(cluster), kSource); });
  require(again.total_gpus() == cluster.total_gpus() && again.gpu_memory_bytes == cluster.gpu_memory_bytes,
          "cluster_to_json -> cluster_from_json changed the GPUs");
  // --gpus resizes the cluster: one GPU, the whole cluster, one node more and the largest count a flag accepts.
  for (const int gpus : {1, cluster.total_gpus(), cluster.total_gpus() + cluster.gpus_per_node, 1 << 17}) {
    try {
      const ClusterDescription resized = with_gpu_count(cluster, gpus);
      require(resized.total_gpus() == gpus, "with_gpu_count gave another GPU count than asked for");
    } catch (const InputError&) {
      // Refusing a count (not whole nodes, no inter-node network) is a clean answer.
    }
  }
}

// --- DeepSpeed configs (--ds-config FILE) ---

struct DeepSpeedCase {
  ModelDescription model;
  int world_size;
};

// A GPT-2 (learned positions, "auto" sizes from hidden), a Llama (GQA) at 8 GPUs and a layer-list model (no hidden:
// "auto" sizes must be refused) at 3 GPUs (batch sizes that do not divide).
const std::vector<DeepSpeedCase>& deepspeed_cases() {
  static const std::vector<DeepSpeedCase> cases = {
      {load_model("gpt2-124m"), 1}, {load_model("llama2-7b"), 8}, {load_model("resnet101"), 3}};
  return cases;
}

void feed_deepspeed_config(std::string_view bytes) {
  const nlohmann::json document = parse_json_text(std::string(bytes), kSource, /*allow_comments=*/true);
  Refusals refusals;
  for (const DeepSpeedCase& c : deepspeed_cases()) {
    TrainingConfig training;
    try {
      apply_deepspeed_config(document, kSource, c.model, c.world_size, training);
    } catch (const InputError& error) {
      refusals.add(error);  // refused for this model or world size; the others may still read it
      continue;
    }
    refusals.accepted();
    // --emit-ds-config writes what was read: DeepSpeed (and zeroplan) must read it back to the same plan.
    TrainingConfig again;
    read_back("emit_deepspeed_config -> apply_deepspeed_config", [&] {
      apply_deepspeed_config(emit_deepspeed_config(training, c.world_size), "emitted", c.model, c.world_size, again);
      return 0;
    });
    require(again.micro_batch == training.micro_batch && again.grad_accum == training.grad_accum &&
                again.precision == training.precision && again.zero.stage == training.zero.stage &&
                again.zero.offload_optimizer == training.zero.offload_optimizer &&
                again.zero.offload_param == training.zero.offload_param,
            "emit_deepspeed_config -> apply_deepspeed_config changed the plan");
  }
  refusals.rethrow_if_all_refused();
}

// --- token files (zeroplan run --data FILE) ---

void feed_token_data(std::string_view bytes) {
  // The format follows the file (llm.c magic, *.bin, else text), so the same bytes are read under both names, for
  // a byte-level vocabulary that is too small, exactly 256, GPT-2's and Llama 3's.
  const ScratchDirectory& directory = scratch();
  Refusals refusals;
  for (const char* name : {"tokens.bin", "tokens.txt"}) {
    const std::string path = directory.write(name, bytes);
    for (const std::int64_t vocab : {255, 256, 50257, 128256}) {
      try {
        exec::TokenSource source = exec::TokenSource::from_file(path, vocab);
        refusals.accepted();
        // The training loop's reads: consecutive windows that wrap at the end of the file.
        if (source.size() >= 7) {
          for (int step = 0; step < 3; ++step) {
            const exec::TokenBatch batch = source.next_batch(2, 3);
            for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
              require(batch.inputs[i] >= 0 && batch.inputs[i] < vocab && batch.targets[i] >= 0 &&
                          batch.targets[i] < vocab,
                      "next_batch returned a token outside the vocabulary");
            }
          }
        }
      } catch (const std::invalid_argument& error) {
        // TokenSource's documented error; run/training_run.cpp turns it into this InputError.
        refusals.add(InputError(path, "--data", error.what()));
      }
    }
  }
  refusals.rethrow_if_all_refused();
}

// --- run reports (zeroplan-gui --report FILE): gui/run_report.cpp, which depends on no Qt ---

void feed_run_report(std::string_view bytes) {
  // load_run_report reads the file without comments (a report is written by zeroplan run, never by hand).
  const nlohmann::json document = parse_json_text(std::string(bytes), kSource, /*allow_comments=*/false);
  const RunReport report = run_report_from_json(document, kSource);
  // The GUI shows a report beside others: two copies of one file must get two distinct labels.
  const std::vector<std::string> labels = report_labels({report, report});
  require(labels.size() == 2 && labels[0] != labels[1], "report_labels gave two reports the same label");
}

// --- the CLI's shared flags and the files they name (cli/common_options.cpp -> core/plan_inputs.cpp) ---

// Input: the first line holds the flags (split at whitespace); the rest holds up to three files separated by NUL
// bytes, which the flags name as @0, @1, @2 (e.g. "--model @0 --ds-config @1 --gpus 8"). Other arguments that
// name a path ('/') are left out: the fuzzer explores the parsers, not the machine's file system.
void feed_plan_inputs(std::string_view bytes) {
  const std::size_t end_of_flags = std::min(bytes.find('\n'), bytes.size());
  const std::string_view flags = bytes.substr(0, end_of_flags);
  std::string_view rest = bytes.substr(std::min(end_of_flags + 1, bytes.size()));
  std::vector<std::string> files;
  while (files.size() < 3) {
    const std::size_t end = std::min(rest.find('\0'), rest.size());
    files.push_back(scratch().write("file" + std::to_string(files.size()) + ".json", rest.substr(0, end)));
    if (end == rest.size()) break;
    rest = rest.substr(end + 1);
  }
  std::vector<std::string> args;
  std::istringstream words{std::string(flags)};
  for (std::string word; words >> word;) {
    if (word.size() == 2 && word[0] == '@' && word[1] >= '0' && word[1] < '0' + static_cast<int>(files.size())) {
      word = files[word[1] - '0'];
    } else if (word.find('/') != std::string::npos) {
      return;
    }
    args.push_back(word);
  }
  CLI::App app("zeroplan plan (fuzz)");
  CommonOptions options;
  add_common_options(app, options);
  std::reverse(args.begin(), args.end());  // CLI::App::parse takes the arguments last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& error) {
    // cli/main.cpp prints CLI11's message and exits 2, as for an InputError.
    throw InputError("command line", "", error.what());
  }
  resolve_inputs(options);
}

// --- checkpoint manifests (zeroplan run --resume DIR): run/checkpoint.cpp ---

// The rank files a manifest names: rank-00000.bin and rank-00001.bin in scratch/checkpoint, 12 bytes (three fp32
// sections) per element, 24 and 16 elements, byte k of each = (7 k + rank) mod 256. The seeds in
// fuzz/corpus/checkpoint_manifest carry their sizes and CRC-32s.
std::string checkpoint_directory() {
  static const std::string directory = [] {
    const ScratchDirectory& folder = scratch();
    const std::filesystem::path made = folder.path() / "checkpoint";
    std::filesystem::create_directories(made);
    const std::int64_t elements[] = {24, 16};
    for (int rank = 0; rank < 2; ++rank) {
      std::string bytes(static_cast<std::size_t>(12 * elements[rank]), '\0');
      for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<char>((7 * k + rank) % 256);
      char name[32];
      std::snprintf(name, sizeof name, "checkpoint/rank-%05d.bin", rank);
      folder.write(name, bytes);
    }
    return made.string();
  }();
  return directory;
}

void feed_checkpoint_manifest(std::string_view bytes) {
  const std::string directory = checkpoint_directory();
  scratch().write("checkpoint/manifest.json", bytes);
  CheckpointReader reader(directory, "--resume");
  reader.verify();
  // What restore() asks of it: ranges of named tensors. Each piece the manifest lists is read back, and each
  // tensor from its start to the end of its last piece (at most 64 elements of either).
  const nlohmann::json manifest = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> ranges;  // tensor, offset, count
  std::map<std::string, std::int64_t> tensor_end;
  for (const nlohmann::json& file : manifest.at("files")) {
    for (const nlohmann::json& piece : file.at("segments")) {
      const std::string tensor = piece.at(0).get<std::string>();
      const std::int64_t offset = piece.at(1).get<std::int64_t>();
      const std::int64_t count = piece.at(2).get<std::int64_t>();
      ranges.emplace_back(tensor, offset, std::min<std::int64_t>(count, 64));
      tensor_end[tensor] = std::max(tensor_end[tensor], offset + count);  // the reader bounds it by 2^58
    }
  }
  for (const auto& [tensor, end] : tensor_end) ranges.emplace_back(tensor, 0, std::min<std::int64_t>(end, 64));
  for (const auto& [tensor, from, n] : ranges) {
    // A read that succeeds writes every element asked for: read twice over two different fills, the results must
    // agree (an element left unwritten keeps its fill).
    std::vector<float> first[3], second[3];
    for (int section = 0; section < 3; ++section) {
      first[section].assign(static_cast<std::size_t>(n), 1.0f);
      second[section].assign(static_cast<std::size_t>(n), 2.0f);
    }
    try {
      reader.read(tensor, from, n, first[0].data(), first[1].data(), first[2].data());
      reader.read(tensor, from, n, second[0].data(), second[1].data(), second[2].data());
    } catch (const InputError&) {
      continue;  // a range the checkpoint does not cover whole is refused, naming the tensor: a clean answer
    }
    for (int section = 0; section < 3; ++section) {
      require(std::memcmp(first[section].data(), second[section].data(), first[section].size() * sizeof(float)) == 0,
              "CheckpointReader::read succeeded but left elements of " + tensor + " unwritten");
    }
  }
}

}  // namespace

const std::vector<ParserInput>& parser_inputs() {
  static const std::vector<ParserInput> inputs = {
      {"model_description", "parse_json_text + is_hf_config ? model_from_hf_config : model_from_json (load_model)",
       feed_model_description},
      {"hf_config", "parse_json_text + model_from_hf_config", feed_hf_config},
      {"cluster_description", "parse_json_text + cluster_from_json, with_gpu_count", feed_cluster_description},
      {"deepspeed_config", "parse_json_text + apply_deepspeed_config, emit_deepspeed_config", feed_deepspeed_config},
      {"token_data", "exec::TokenSource::from_file, next_batch", feed_token_data},
      {"run_report", "parse_json_text + run_report_from_json (gui/run_report.cpp), report_labels", feed_run_report},
      {"plan_inputs", "CLI11 parse of add_common_options + resolve_inputs (resolve_plan_inputs)", feed_plan_inputs},
      {"checkpoint_manifest", "CheckpointReader(dir, \"--resume\"), verify, read (run/checkpoint.cpp)",
       feed_checkpoint_manifest},
  };
  return inputs;
}

const ParserInput& parser_input(std::string_view name) {
  const auto& inputs = parser_inputs();
  const auto found =
      std::find_if(inputs.begin(), inputs.end(), [&](const ParserInput& input) { return input.name == name; });
  if (found != inputs.end()) return *found;
  std::string list;
  for (const auto& input : inputs) list += (list.empty() ? "" : ", ") + input.name;
  throw std::invalid_argument("no parser input named \"" + std::string(name) + "\"; known: " + list);
}

}  // namespace zeroplan::fuzz
