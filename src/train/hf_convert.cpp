#include "vescale/train/hf_convert.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "vescale/models/model.h"
#include "vescale/models/registry.h"
#include "vescale/checkpoint/distributed_checkpoint.h"
#include "vescale/checkpoint/safetensors.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/tokenizer/text_tokenizer.h"
#include "vescale/train/config.h"
#include "vescale/train/hf_weights.h"

namespace vescale::train {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The config a checkpoint recorded, without what conversion does not need (and may not find).
Config config_of(const checkpoint::CheckpointInfo& info, const std::string& who) {
  const json meta = json::parse(info.metadata);
  VESCALE_CHECK(meta.contains("config"), who, ": ", info.folder,
                " records no config (written before checkpoints did); re-save it with this build");
  json c = meta["config"];
  if (c.contains("parallel")) c["parallel"].erase("plan");
  if (c.contains("model")) c["model"].erase("init_from"), c["model"].erase("from_hf_config");
  // The tokenizer decodes text only; a checkpoint moved without it still converts and loads
  // (vescale-generate then asks for --tokenizer).
  if (c.contains("data") && c["data"].contains("tokenizer") && c["data"]["tokenizer"].is_string() &&
      !c["data"]["tokenizer"].get<std::string>().empty() &&
      !fs::is_regular_file(c["data"]["tokenizer"].get<std::string>())) {
    log::warn(who + ": the config in " + info.folder + " names data.tokenizer '" +
              c["data"]["tokenizer"].get<std::string>() + "', which is not there; ignored");
    c["data"].erase("tokenizer");
  }
  return Config::from_json(c.dump(), info.folder + "/index.json");
}

void write_text(const fs::path& path, const std::string& text) {
  checkpoint::write_text_durably(path.string(), text + "\n", "vescale-convert");
}

// The files a Hugging Face model folder holds (weights in either format, their index, the
// configs, the tokenizer): what --overwrite removes. Other files (a README) stay.
bool model_file(const std::string& name) {
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".safetensors") || ends(".safetensors.index.json") ||
         name.rfind("pytorch_model", 0) == 0 || name == "config.json" ||
         name == "generation_config.json" || name == "tokenizer.json" ||
         name == "tokenizer_config.json" || name == "special_tokens_map.json";
}

// The export's folder: made, and emptied of another model's files with --overwrite.
void prepare_out(const fs::path& out, bool overwrite) {
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_empty(out, ec)) {
    VESCALE_CHECK(fs::is_directory(out), "vescale-convert: --to-hf ", out.string(),
                  " is a file; name a folder");
    VESCALE_CHECK(overwrite, "vescale-convert: --to-hf ", out.string(),
                  " is not empty; a second model's files beside the first's would mix them at "
                  "load. Choose an empty folder, or pass --overwrite to replace the model there");
    for (const auto& e : fs::directory_iterator(out))
      if (e.is_regular_file() && model_file(e.path().filename().string())) fs::remove(e.path());
  }
  fs::create_directories(out);
}

// The special tokens a tokenizer.json declares: (eos, bos) as transformers names them, by the
// conventions of LLaMA-3 (<|begin_of_text|>, <|end_of_text|>), GPT-2 (<|endoftext|> for both)
// and SentencePiece (<s>, </s>); empty where the vocabulary has none.
std::pair<std::string, std::string> special_tokens(const json& tokenizer) {
  std::set<std::string> have;
  for (const auto& t : tokenizer.value("added_tokens", json::array()))
    if (t.value("special", false)) have.insert(t.value("content", ""));
  auto first_of = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (have.count(n)) return std::string(n);
    return std::string();
  };
  const std::string eos = first_of({"<|end_of_text|>", "<|endoftext|>", "</s>", "<|eot_id|>"});
  const std::string bos = first_of({"<|begin_of_text|>", "<s>", "<|endoftext|>"});
  return {eos, bos};
}

// tokenizer.json, tokenizer_config.json and generation_config.json for the run's tokenizer
// (data.tokenizer; bytes when none: then only the generation config, without token ids).
std::vector<std::string> write_tokenizer_files(const fs::path& out, const Config& cfg) {
  std::vector<std::string> written;
  json generation{{"_from_model_config", true}};
  const std::string& path = cfg.data.tokenizer;
  if (!path.empty()) {
    fs::copy_file(path, out / "tokenizer.json", fs::copy_options::overwrite_existing);
    written.push_back("tokenizer.json");
    std::ifstream in(path);
    const json tok = json::parse(in);
    const auto [eos, bos] = special_tokens(tok);
    const tokenizer::TextTokenizer ours(path);
    json tc{{"tokenizer_class", "PreTrainedTokenizerFast"},
            {"model_max_length", cfg.model.options->max_seq_len()},
            {"clean_up_tokenization_spaces", false}};
    if (!bos.empty()) tc["bos_token"] = bos;
    if (!eos.empty()) tc["eos_token"] = eos;
    write_text(out / "tokenizer_config.json", tc.dump(2));
    written.push_back("tokenizer_config.json");
    const auto stops = ours.stop_ids();
    if (!stops.empty())
      generation["eos_token_id"] = stops.size() == 1 ? json(stops[0]) : json(stops);
    if (!bos.empty()) {
      for (const auto& t : tok.value("added_tokens", json::array()))
        if (t.value("content", "") == bos) generation["bos_token_id"] = t.value("id", 0);
    }
  }
  write_text(out / "generation_config.json", generation.dump(2));
  written.push_back("generation_config.json");
  return written;
}

}  // namespace

CheckpointWeights read_checkpoint_weights(const std::string& checkpoint, const std::string& who) {
  std::string folder = checkpoint;
  if (!fs::exists(fs::path(folder) / "index.json")) {
    auto l = checkpoint::latest(checkpoint);
    VESCALE_CHECK(l, who, ": ", checkpoint,
                  " is neither a checkpoint folder (index.json) nor a root with `latest`");
    folder = *l;
  }
  const auto info = checkpoint::read_info(folder);
  CheckpointWeights out{folder, config_of(info, who), {}};
  // The model's tensors, whole, in one process.
  checkpoint::StateDict state;
  for (const auto& [name, e] : info.tensors)
    if (name.rfind("model/", 0) == 0)
      state[name] = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
  VESCALE_CHECK(!state.empty(), who, ": ", folder, " holds no model/ tensors");
  checkpoint::load(folder, state);
  for (auto& [name, t] : state) out.weights[name.substr(6)] = t;
  return out;
}

Config hf_folder_config(const std::string& hf_dir, const std::string& who) {
  std::ifstream in(fs::path(hf_dir) / "config.json");
  VESCALE_CHECK(in.good(), who, ": no ", (fs::path(hf_dir) / "config.json").string(),
                "; point it at a Hugging Face model folder (config.json and model.safetensors)");
  json hf;
  try {
    hf = json::parse(in);
  } catch (const json::exception& e) {
    VESCALE_FAIL(who, ": ", hf_dir, "/config.json is not valid JSON: ", e.what());
  }
  const std::string hf_type = hf.value("model_type", "");
  // Our families by transformers' model_type: those whose options read a config.json.
  const models::ModelSpec* by_hf = models::find_spec_by_hf_type(hf_type);
  const std::string type = by_hf ? by_hf->type : hf_type;
  const models::ModelFamily* family = models::find_family(type);
  if (!by_hf || !family || !family->from_hf_config) {
    std::string supported;
    for (const auto& t : models::family_types())
      if (models::find_family(t)->from_hf_config)
        supported += (supported.empty() ? "" : ", ") + models::spec(t).hf_type();
    VESCALE_FAIL(who, ": ", hf_dir, " holds a '", hf_type, "' model; supported: ", supported);
  }
  // model.* from config.json: the same path as model.init_from with from_hf_config.
  // (train.* is a placeholder: the folder describes a model, not a run.)
  return Config::from_json(json{{"model",
                                 {{"type", type},
                                  {"init_from", fs::absolute(hf_dir).string()},
                                  {"from_hf_config", true}}},
                                {"train", {{"seq_len", 1}}}}
                               .dump(),
                           hf_dir + "/config.json");
}

std::vector<std::string> export_hf(const std::string& checkpoint, const std::string& out,
                                   const HfExportOptions& opts) {
  VESCALE_CHECK(opts.max_shard_bytes > 0, "vescale-convert: --max-shard-size must be > 0");
  auto [folder, cfg, ours] = read_checkpoint_weights(checkpoint, "vescale-convert");
  const auto& builder = models::spec(cfg.model.type);
  VESCALE_CHECK(builder.to_hf, "vescale-convert: model.type '", cfg.model.type,
                "' has no Hugging Face adapter");
  models::StateDict hf = builder.to_hf(ours, *cfg.model.options);
  const at::ScalarType dtype = opts.dtype == DType::Bf16 ? at::kBFloat16 : at::kFloat;
  for (auto& [k, t] : hf)
    if (at::isFloatingType(t.scalar_type())) t = t.to(dtype).contiguous();

  // Files of at most max_shard_bytes, in name order.
  std::vector<std::map<std::string, at::Tensor>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& [k, t] : hf) {
    const int64_t bytes = static_cast<int64_t>(t.numel() * t.element_size());
    if (in_shard > 0 && in_shard + bytes > opts.max_shard_bytes)
      shards.emplace_back(), in_shard = 0;
    shards.back()[k] = t;
    in_shard += bytes, total += bytes;
  }
  prepare_out(out, opts.overwrite);
  std::vector<std::string> written;
  const std::map<std::string, std::string> meta{{"format", "pt"}};
  if (shards.size() == 1) {
    checkpoint::save_safetensors((fs::path(out) / "model.safetensors").string(), shards[0], meta);
    written.push_back("model.safetensors");
  } else {
    json weight_map = json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      checkpoint::save_safetensors((fs::path(out) / name).string(), shards[i], meta);
      for (const auto& [k, t] : shards[i]) weight_map[k] = name;
      written.push_back(name);
    }
    write_text(fs::path(out) / "model.safetensors.index.json",
               json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2));
    written.push_back("model.safetensors.index.json");
  }
  const models::ModelFamily* family = models::find_family(cfg.model.type);
  VESCALE_CHECK(family && family->to_hf_config, "vescale-convert: model.type '", cfg.model.type,
                "' has no Hugging Face config");
  write_text(
      fs::path(out) / "config.json",
      family->to_hf_config(*cfg.model.options, dtype == at::kBFloat16 ? "bfloat16" : "float32"));
  written.push_back("config.json");
  for (auto& f : write_tokenizer_files(out, cfg)) written.push_back(std::move(f));
  return written;
}

std::string import_hf(const std::string& hf_dir, const std::string& root, bool overwrite) {
  const Config cfg = hf_folder_config(hf_dir, "vescale-convert");
  // A training run's root: our step-00000000 would become its `latest`, and it would resume the
  // conversion instead of its own steps.
  if (checkpoint::has_checkpoints(root)) {
    const auto at = checkpoint::latest(root);
    VESCALE_CHECK(overwrite, "vescale-convert: --to-checkpoint ", root,
                  " already holds checkpoints", at ? " (latest: " + *at + ")" : "",
                  "; writing there would repoint its latest. Choose an empty folder, or pass "
                  "--overwrite to remove them first");
    for (const auto& e : fs::directory_iterator(root)) {
      const std::string name = e.path().filename().string();
      if (name == "latest" || (e.is_directory() && name.rfind("step-", 0) == 0))
        fs::remove_all(e.path());
    }
  }
  const std::string& type = cfg.model.type;
  const auto ours = models::spec(type).from_hf(map_hf_weights(hf_dir), *cfg.model.options);
  checkpoint::StateDict state;
  for (const auto& [k, t] : ours) state["model/" + k] = t.contiguous();
  json c = json::parse(cfg.to_json());
  c["model"].erase("init_from"), c["model"].erase("from_hf_config");
  const json meta{{"step", 0}, {"model", type}, {"config", c}, {"converted_from", hf_dir}};
  return checkpoint::save(root, "step-00000000", state, meta.dump());
}

}  // namespace vescale::train
