// The config schema is written once, as visit() functions over the structs; the Reader visitor
// (common/json_schema.h) parses and checks JSON with them, the Writer prints a config back.
#include "vescale/train/config.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <map>
#include <sstream>
#include <type_traits>

#include "vescale/common/check.h"
#include "vescale/common/json_schema.h"
#include "vescale/common/suggest.h"
#include "vescale/models/shared/hf_config.h"

namespace vescale::train {
namespace {

using json = json_schema::json;
using Mesh = json_schema::IntMap;

using json_schema::a_type;
using json_schema::Reader;
using json_schema::Writer;

// Named values -------------------------------------------------------------------------------

// An enum's names in the order of its values, and how a bad name is reported (the messages the
// checks gave when these fields were strings).
template <class E>
struct Names {
  std::vector<const char*> names;
  bool one_of = true;  // "'x' is not one of a, b, c"; else "must be a, b or c"
  std::string list(const char* last_sep) const {
    std::string s;
    for (size_t i = 0; i < names.size(); ++i)
      s += (i == 0 ? "" : i + 1 == names.size() ? last_sep : ", ") + std::string(names[i]);
    return s;
  }
};
const Names<DType> kDTypes{{"fp32", "bf16"}};
const Names<GradReduce> kGradReduce{{"overlap", "bucketed", "per_param"}, false};
const Names<optim::Decay> kDecays{{"cosine", "linear", "constant"}};

template <class E>
void choice(Reader& r, const char* k, E& out, const Names<E>& n) {
  if (r.raw(k) == nullptr) return;  // absent: the default stays
  std::string name;
  r.field(k, name);
  for (size_t i = 0; i < n.names.size(); ++i)
    if (name == n.names[i]) {
      out = static_cast<E>(i);
      return;
    }
  r.fail(k,
         n.one_of ? "'" + name + "' is not one of " + n.list(", ") : "must be " + n.list(" or "));
}

template <class E>
void choice(Writer& w, const char* k, E& v, const Names<E>& n) {
  std::string name = n.names.at(static_cast<size_t>(v));
  w.field(k, name);
}

// The schema -------------------------------------------------------------------------------

// model.type picks the family; its options read and write the other model.* fields.
void visit(Reader& v, ModelConfig& c) {
  v.field("type", c.type);
  v.field("init_from", c.init_from);
  v.field("from_hf_config", c.from_hf_config);
  v.set_context(" for model.type '" + c.type + "'");
  const models::ModelFamily* family = models::find_family(c.type);
  if (!family) v.fail("type", models::unknown_type_message(c.type));
  c.options = family->defaults();
  c.options->read(v);
}

void visit(Writer& v, ModelConfig& c) {
  v.field("type", c.type);
  if (!c.init_from.empty()) v.field("init_from", c.init_from);
  if (c.from_hf_config) v.field("from_hf_config", c.from_hf_config);
  c.options->write(v);
}

void visit(Reader& v, PipelineOverrides& c) {
  if (v.raw("schedule")) {
    std::string name;
    v.field("schedule", name);
    c.schedule = plan::schedule_kind_named(name);
    if (!c.schedule) v.fail("schedule", plan::unknown_schedule_kind(name));
  }
  v.field("microbatches", c.microbatches);
  v.field("chunks", c.chunks);
  v.field("split", c.split);
  v.field("stages", c.stages);
  if (!c.split.empty() && c.split != "even")
    v.fail("split", "must be \"even\" (or list the cuts in parallel.pipeline.stages)");
}

// Only what is set: a config without overrides prints no pipeline section.
void visit(Writer& v, PipelineOverrides& c) {
  if (c.schedule) {
    std::string name = plan::to_string(*c.schedule);
    v.field("schedule", name);
  }
  if (c.microbatches) v.field("microbatches", c.microbatches);
  if (c.chunks) v.field("chunks", c.chunks);
  if (!c.split.empty()) v.field("split", c.split);
  if (!c.stages.empty()) v.field("stages", c.stages);
}

template <class V>
void visit(V& v, ParallelConfig& c) {
  v.field("mesh", c.mesh);
  v.field("plan", c.plan);
  v.field("plan_device", c.plan_device);
  v.field("static_eager", c.static_eager);
  v.field("zero", c.zero);
  choice(v, "grad_reduce", c.grad_reduce, kGradReduce);
  choice(v, "reduce_dtype", c.reduce_dtype, Names<DType>{kDTypes.names, false});
  if (std::is_same_v<V, Reader> || c.pipeline.any())
    v.object("pipeline", [&](auto& s) { visit(s, c.pipeline); });
}

template <class V>
void visit(V& v, TrainConfig& c) {
  v.field("steps", c.steps);
  v.field("batch_size", c.batch_size);
  v.field("micro_batch_size", c.micro_batch_size);
  v.field("global_batch_size", c.global_batch_size);
  v.field("seq_len", c.seq_len);
  v.field("grad_accum", c.grad_accum);
  v.field("lr", c.lr);
  v.field("min_lr", c.min_lr);
  v.field("warmup_steps", c.warmup_steps);
  choice(v, "decay", c.decay, kDecays);
  v.field("weight_decay", c.weight_decay);
  v.field("betas", c.betas);
  v.field("eps", c.eps);
  v.field("grad_clip", c.grad_clip);
  v.field("max_loss_spike", c.max_loss_spike);
  v.field("allow_oversubscribe", c.allow_oversubscribe);
  v.field("seed", c.seed);
  choice(v, "dtype", c.dtype, kDTypes);
  v.field("activation_checkpointing", c.activation_checkpointing);
  v.field("peak_flops", c.peak_flops);
  v.field("log_every", c.log_every);
  v.field("eval_every", c.eval_every);
  v.field("eval_steps", c.eval_steps);
  v.field("sample_every", c.sample_every);
  v.field("sample_prompt", c.sample_prompt);
  v.field("sample_tokens", c.sample_tokens);
  v.field("sample_temperature", c.sample_temperature);
}

template <class V>
void visit(V& v, DataConfig& c) {
  v.field("train", c.train);
  v.field("val", c.val);
  v.field("shuffle", c.shuffle);
  v.field("tokenizer", c.tokenizer);
}

template <class V>
void visit(V& v, CheckpointConfig& c) {
  v.field("dir", c.dir);
  v.field("every", c.every);
  v.field("keep", c.keep);
  v.field("async", c.async);
  v.field("resume", c.resume);
  v.field("overwrite", c.overwrite);
  v.field("in_memory_every", c.in_memory_every);
}

template <class V>
void visit(V& v, TimelineConfig& c) {
  v.field("steps", c.steps);
  v.field("out", c.out);
  v.field("per_rank", c.per_rank);
}

template <class V>
void visit(V& v, LogConfig& c) {
  v.field("metrics_jsonl", c.metrics_jsonl);
  v.field("tensorboard", c.tensorboard);
  v.field("level", c.level);
  v.object("timeline", [&](auto& s) { visit(s, c.timeline); });
}

template <class V>
void visit(V& v, Config& c) {
  v.object("model", [&](auto& s) { visit(s, c.model); });
  v.object("parallel", [&](auto& s) { visit(s, c.parallel); });
  v.object("train", [&](auto& s) { visit(s, c.train); });
  v.object("data", [&](auto& s) { visit(s, c.data); });
  v.object("checkpoint", [&](auto& s) { visit(s, c.checkpoint); });
  v.object("log", [&](auto& s) { visit(s, c.log); });
}

// Checks beyond types ------------------------------------------------------------------------

struct Checker {
  const std::string& source;
  const std::map<std::string, std::string>* origins = nullptr;  // the --set of a key
  void operator()(bool ok, const std::string& key, const std::string& msg) const {
    VESCALE_CHECK(ok, json_schema::origin_of(origins, key, "config '" + source + "'"), ": ", key,
                  ": ", msg);
  }
};

void check_one_of(const Checker& check, const std::string& key, const std::string& v,
                  const std::vector<std::string>& ok) {
  std::string list;
  for (auto& o : ok) list += (list.empty() ? "" : ", ") + o;
  check(std::find(ok.begin(), ok.end(), v) != ok.end(), key, "'" + v + "' is not one of " + list);
}

void positive(const Checker& check, const std::string& key, int64_t v) {
  check(v >= 1, key, "must be >= 1, got " + std::to_string(v));
}

void validate(const Config& c, const std::string& source,
              const std::map<std::string, std::string>& origins) {
  const Checker check{source, &origins};
  const auto& m = c.model;
  m.options->validate([&](const std::string& field, const std::string& message) {
    check(false, "model." + field, message);
  });

  int inferred = 0;
  std::set<std::string> names;
  for (auto& [name, size] : c.parallel.mesh) {
    check(!name.empty() && names.insert(name).second, "parallel.mesh",
          "dim names must be non-empty and distinct");
    check(size >= 1 || size == -1, "parallel.mesh." + name,
          "must be >= 1, or -1 to take the rest of the world");
    inferred += size == -1;
  }
  check(inferred <= 1, "parallel.mesh", "at most one dim may be -1");
  check(c.parallel.zero >= 0 && c.parallel.zero <= 3, "parallel.zero", "must be 0, 1, 2 or 3");
  check(c.parallel.pipeline.microbatches >= 0, "parallel.pipeline.microbatches",
        "must be >= 1 (0 keeps the plan's)");
  check(c.parallel.pipeline.chunks >= 0, "parallel.pipeline.chunks",
        "must be >= 1 (0 keeps the plan's)");
  check(c.parallel.pipeline.split.empty() || c.parallel.pipeline.stages.empty(),
        "parallel.pipeline.split", "and parallel.pipeline.stages both given; set one");
  check(c.parallel.zero == 0 || c.parallel.grad_reduce != GradReduce::PerParam, "parallel.zero",
        "needs the bucketed reducer: set parallel.grad_reduce to overlap or bucketed");

  const auto& t = c.train;
  for (auto [k, v] : {std::pair{"steps", t.steps},
                      {"batch_size", t.batch_size},
                      {"seq_len", t.seq_len},
                      {"grad_accum", t.grad_accum},
                      {"log_every", t.log_every},
                      {"eval_steps", t.eval_steps}})
    positive(check, std::string("train.") + k, v);
  check(t.global_batch_size >= 0, "train.global_batch_size",
        "must be >= 1 (0: batch_size x micro-batches x data ranks)");
  check(t.global_batch_size == 0 || t.grad_accum == 1, "train.grad_accum",
        "is derived from train.global_batch_size (global / (micro batch x data ranks)); remove "
        "train.grad_accum, or train.global_batch_size");
  check(t.global_batch_size == 0 || c.parallel.pipeline.microbatches == 0,
        "parallel.pipeline.microbatches",
        "is derived from train.global_batch_size (global / (micro batch x data ranks)); remove "
        "one of them");
  check(!c.parallel.auto_plan() || t.global_batch_size > 0, "parallel.plan",
        "\"auto\" needs train.global_batch_size: the planner keeps the math fixed while it "
        "chooses the layout");
  check(t.seq_len <= m.max_seq_len(), "train.seq_len",
        std::to_string(t.seq_len) + " exceeds the model's maximum sequence length " +
            std::to_string(m.max_seq_len()));
  check(t.lr > 0, "train.lr", "must be > 0");
  check(t.min_lr >= 0 && t.min_lr <= t.lr, "train.min_lr", "must be in [0, train.lr]");
  check(t.warmup_steps >= 0, "train.warmup_steps", "must be >= 0");
  check(t.weight_decay >= 0, "train.weight_decay", "must be >= 0");
  check(
      t.betas.size() == 2 && t.betas[0] >= 0 && t.betas[0] < 1 && t.betas[1] >= 0 && t.betas[1] < 1,
      "train.betas", "must be two numbers in [0, 1), like [0.9, 0.95]");
  check(t.eps > 0, "train.eps", "must be > 0");
  check(t.grad_clip >= 0, "train.grad_clip", "must be >= 0 (0 turns clipping off)");
  check(
      t.max_loss_spike == 0 || t.max_loss_spike > 1, "train.max_loss_spike",
      "must be 0 (guard off) or above 1, like 3 (a loss above 3x the recent median stops the run)");
  check(t.peak_flops.is_auto || t.peak_flops.value >= 0, "train.peak_flops",
        "must be \"auto\" or >= 0 (0 leaves MFU out)");
  check(t.sample_every >= 0, "train.sample_every", "must be >= 0 (0: no samples)");
  check(t.sample_tokens >= 1, "train.sample_tokens", "must be >= 1");
  check(t.sample_temperature >= 0, "train.sample_temperature", "must be >= 0 (0: greedy)");
  check(t.sample_every == 0 || !t.sample_prompt.empty(), "train.sample_prompt",
        "must not be empty when train.sample_every is set");
  check(t.eval_every >= 0, "train.eval_every", "must be >= 0 (0: no evaluation)");
  check(c.checkpoint.every >= 0, "checkpoint.every", "must be >= 0");
  check(c.checkpoint.keep >= 0, "checkpoint.keep", "must be >= 0 (0 keeps every checkpoint)");
  check(c.checkpoint.in_memory_every >= 0, "checkpoint.in_memory_every",
        "must be >= 0 (0: no copies in memory)");
  check(c.checkpoint.in_memory_every == 0 || !c.checkpoint.dir.empty(),
        "checkpoint.in_memory_every",
        "needs checkpoint.dir (memory holds the newest copy; the folder holds the rest)");
  check_one_of(check, "log.level", c.log.level, {"trace", "debug", "info", "warn", "error", "off"});
  try {
    timeline_window(c.log.timeline, t.steps);
  } catch (const Error& e) {
    check(false, "log.timeline.steps", e.what());
  }
}

// Paths ------------------------------------------------------------------------------------

bool glob_matches(const std::string& pattern) {
  glob_t g{};
  const bool any = ::glob(pattern.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
  globfree(&g);
  return any;
}

// Next to the config file if it is there, else as given (the working directory).
std::string resolve_path(const std::string& p, const std::string& base_dir) {
  namespace fs = std::filesystem;
  if (p.empty() || fs::path(p).is_absolute() || base_dir.empty()) return p;
  if (p.rfind("builtin:", 0) == 0) return p;  // the built-in data (data_files)
  const std::string near = (fs::path(base_dir) / p).lexically_normal().string();
  if (glob_matches(near) || !glob_matches(p)) return near;
  return p;
}

// --set a.b.c=value --------------------------------------------------------------------------

// Applies one --set; returns the key it set.
std::string apply_override(json& cfg, const std::string& source, const std::string& kv) {
  // The command line is bytes, JSON strings are UTF-8: a bad byte would make every later dump
  // of the config (messages, to_json) throw nlohmann's type_error instead of our error.
  try {
    (void)json(kv).dump();
  } catch (const json::type_error&) {
    VESCALE_FAIL("--set '", kv, "': not valid UTF-8; keys and values must be UTF-8 text");
  }
  const auto eq = kv.find('=');
  VESCALE_CHECK(eq != std::string::npos && eq > 0, "--set '", kv,
                "': expected key=value, like train.steps=200");
  const std::string key = kv.substr(0, eq), text = kv.substr(eq + 1);
  json value;
  try {
    value = json::parse(text);
  } catch (const std::exception&) {
    value = text;
    // [a.bin,b.bin]: a list whose quotes the shell ate; its items are strings.
    if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
      value = json::array();
      std::stringstream items(text.substr(1, text.size() - 2));
      for (std::string item; std::getline(items, item, ',');) {
        const auto b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
        if (b != std::string::npos) value.push_back(item.substr(b, e - b + 1));
      }
    }
  }
  // Mesh dims are ordered: a new one can't be slotted in by name, only by setting the whole mesh.
  // (Only into a parallel section that is an object or absent: anything else is reported by the
  // walk below; nlohmann's operator[] would throw its own type_error on a string.)
  if (key.rfind("parallel.mesh.", 0) == 0 && cfg.is_object() &&
      (!cfg.contains("parallel") ||
       (cfg["parallel"].is_object() && !cfg["parallel"].contains("mesh"))))
    cfg["parallel"]["mesh"] = {{"dp", -1}};
  json* node = &cfg;
  std::string walked;
  for (size_t b = 0, e; b <= key.size(); b = e + 1) {
    e = key.find('.', b);
    if (e == std::string::npos) e = key.size();
    const std::string part = key.substr(b, e - b);
    VESCALE_CHECK(!part.empty(), "--set ", key, ": empty key part; write keys like train.steps");
    VESCALE_CHECK(node->is_object(), "--set ", key, ": config '", source, "' has ", a_type(*node),
                  " at '", walked, "', not a section");
    walked += (walked.empty() ? "" : ".") + part;
    const bool last = e == key.size();
    if (!node->contains(part)) {
      VESCALE_CHECK(walked.rfind("parallel.mesh.", 0) != 0, "--set ", key, ": config '", source,
                    "' has no key '", walked,
                    "'; mesh dims are ordered, so set the whole mesh: --set "
                    "'parallel.mesh={\"dp\":2,\"tp\":2}'");
      // Absent from the file: the schema reader checks the key and the type.
      (*node)[part] = last ? value : json::object();
    } else if (last) {
      json& old = (*node)[part];
      if (old.is_array() && value.is_string())
        value = json::array({value});  // file lists: one file
      // A string-or-list field (data.train) may come as either: the schema reader decides.
      VESCALE_CHECK(std::string(value.type_name()) == old.type_name() ||
                        (value.is_number() && old.is_number()) ||
                        (old.is_string() && value.is_array()),
                    "--set ", key, ": the config has ",
                    a_type(old) == "an integer" ? "a number" : a_type(old), " there, not ",
                    a_type(value), " ('", text, "')");
      old = value;
    }
    node = &(*node)[part];
  }
  return key;
}

}  // namespace

const char* to_string(DType d) { return kDTypes.names.at(static_cast<size_t>(d)); }
const char* to_string(GradReduce g) { return kGradReduce.names.at(static_cast<size_t>(g)); }
const char* to_string(optim::Decay d) { return kDecays.names.at(static_cast<size_t>(d)); }

DType parse_dtype(const std::string& name, const std::string& what) {
  for (size_t i = 0; i < kDTypes.names.size(); ++i)
    if (name == kDTypes.names[i]) return static_cast<DType>(i);
  VESCALE_FAIL(what, ": '", name, "' is not one of ", kDTypes.list(", "));
}

ModelConfig::ModelConfig() : options(models::default_options(type)) {}

ModelConfig::ModelConfig(const ModelConfig& other)
    : type(other.type),
      options(other.options->clone()),
      init_from(other.init_from),
      from_hf_config(other.from_hf_config) {}

ModelConfig& ModelConfig::operator=(const ModelConfig& other) {
  if (this != &other) {
    type = other.type, options = other.options->clone();
    init_from = other.init_from, from_hf_config = other.from_hf_config;
  }
  return *this;
}

Config Config::from_json(const std::string& text, const std::string& source,
                         const std::vector<std::string>& overrides, const std::string& base_dir) {
  json j = json_schema::parse(text, "config", source);
  VESCALE_CHECK(j.is_object(), "config '", source,
                "': the top level must be an object with sections model, parallel, ",
                "train, data, checkpoint, log");
  std::map<std::string, std::string> origins;  // key -> the --set that gave it, for messages
  for (auto& kv : overrides) origins[apply_override(j, source, kv)] = "--set " + kv;
  // model.init_from: the Hugging Face config fills model.* (from_hf_config) or must agree.
  models::HfConfigFields hf_fields;
  std::string hf_config;
  if (j.contains("model") && j["model"].is_object() && j["model"].contains("init_from") &&
      j["model"]["init_from"].is_string() && !j["model"]["init_from"].get<std::string>().empty()) {
    const auto& m = j["model"];
    const std::string dir = resolve_path(m["init_from"].get<std::string>(), base_dir);
    j["model"]["init_from"] = dir;
    hf_config = (std::filesystem::path(dir) / "config.json").string();
    std::ifstream in(hf_config);
    VESCALE_CHECK(in.good(), "config '", source, "': model.init_from: no ", hf_config,
                  "; point it at a Hugging Face model folder (config.json and model.safetensors)");
    std::stringstream text;
    text << in.rdbuf();
    const std::string type = m.value("type", std::string("gpt"));
    const models::ModelFamily* family = models::find_family(type);
    VESCALE_CHECK(family, "config '", source,
                  "': model.type: ", models::unknown_type_message(type));
    VESCALE_CHECK(family->from_hf_config, "config '", source, "': model.init_from: model.type '",
                  type, "' has no Hugging Face counterpart");
    hf_fields = family->from_hf_config(text.str(), hf_config);
    if (m.value("from_hf_config", false)) {
      for (const auto& [field, value] : hf_fields)
        apply_override(j, source, "model." + field + "=" + value);
      hf_fields.clear();  // taken, nothing to compare
    }
  }
  Config c;
  c.source = source;
  Reader r(j, "", source);
  r.set_origins(&origins);
  visit(r, c);
  r.finish();
  // train.micro_batch_size is Megatron-LM's name for train.batch_size: one value, two names.
  // A --set of one wins over the file's other; both in the file (or both set) must agree.
  if (c.train.micro_batch_size != 0) {
    const json* train = j.contains("train") && j["train"].is_object() ? &j["train"] : nullptr;
    const bool both = train && train->contains("batch_size");
    const bool micro_set = origins.count("train.micro_batch_size") > 0;
    const bool batch_set = origins.count("train.batch_size") > 0;
    if (both && batch_set && !micro_set) {
      c.train.micro_batch_size = c.train.batch_size;
    } else {
      VESCALE_CHECK(!both || micro_set != batch_set || c.train.batch_size == c.train.micro_batch_size,
                    json_schema::origin_of(&origins, "train.micro_batch_size",
                                           "config '" + source + "'"),
                    ": train.micro_batch_size=", c.train.micro_batch_size, " and train.batch_size=",
                    c.train.batch_size, " name the same thing (sequences per data rank and "
                    "micro-batch) with different values; set one of them");
    }
    c.train.batch_size = c.train.micro_batch_size;
  }
  c.train.micro_batch_size = c.train.batch_size;
  validate(c, source, origins);
  if (!hf_fields.empty()) {
    const json mine = json::parse(c.to_json())["model"];
    for (const auto& [field, value] : hf_fields) {
      const json want = json::parse(value);
      json got = mine;
      for (size_t b = 0, e; b <= field.size(); b = e + 1) {
        e = field.find('.', b);
        if (e == std::string::npos) e = field.size();
        got = got.value(field.substr(b, e - b), json());
      }
      const bool same = want.is_number() && got.is_number()
                            ? std::abs(want.get<double>() - got.get<double>()) <=
                                  1e-9 * std::max(1.0, std::abs(want.get<double>()))
                            : want == got;
      VESCALE_CHECK(
          same, "config '", source, "': model.", field, " is ", got.dump(), " but ", hf_config,
          " says ", want.dump(),
          "; set model.from_hf_config=true to take the Hugging Face config, or fix model.", field);
    }
  }
  if (!c.parallel.auto_plan()) c.parallel.plan = resolve_path(c.parallel.plan, base_dir);
  const auto origin = [&](const std::string& key) {
    return json_schema::origin_of(&origins, key, "config '" + source + "'");
  };
  VESCALE_CHECK(c.parallel.plan.empty() || c.parallel.auto_plan() ||
                    std::filesystem::is_regular_file(c.parallel.plan),
                origin("parallel.plan"), ": parallel.plan: no file '", c.parallel.plan,
                "'; relative paths are looked up next to the config file, ",
                "then in the working directory");
  for (auto* list : {&c.data.train, &c.data.val})
    for (auto& p : *list) p = resolve_path(p, base_dir);
  c.data.tokenizer = resolve_path(c.data.tokenizer, base_dir);
  // Absolute: checkpoints record the config, and are read from other working directories.
  if (!c.data.tokenizer.empty())
    c.data.tokenizer = std::filesystem::absolute(c.data.tokenizer).lexically_normal().string();
  VESCALE_CHECK(c.data.tokenizer.empty() || std::filesystem::is_regular_file(c.data.tokenizer),
                origin("data.tokenizer"), ": data.tokenizer: no file '", c.data.tokenizer,
                "'; name a Hugging Face tokenizer.json (relative paths: next to the config, then ",
                "the working directory)");
  return c;
}

Config Config::from_file(const std::string& path, const std::vector<std::string>& overrides) {
  VESCALE_CHECK(!std::filesystem::is_directory(path), "config: '", path,
                "' is a directory; pass a JSON file to --config, like configs/llama_tiny.json");
  std::ifstream f(path);
  VESCALE_CHECK(f.good(), "config: cannot open '", path, "'; pass an existing file to --config");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json(ss.str(), path, overrides, std::filesystem::path(path).parent_path().string());
}

std::string Config::to_json() const {
  Writer w;
  Config copy = *this;
  visit(w, copy);
  return w.node.dump(2);
}

std::pair<int64_t, int64_t> timeline_window(const TimelineConfig& tl, int64_t train_steps) {
  if (!tl.on()) return {0, -1};
  if (tl.steps.empty())
    return {std::min<int64_t>(2, train_steps), std::min<int64_t>(4, train_steps)};
  const std::string& s = tl.steps;
  auto number = [&](const std::string& part) -> int64_t {
    VESCALE_CHECK(!part.empty() && part.size() <= 12 &&
                      part.find_first_not_of("0123456789") == std::string::npos,
                  "'", s, "' is not a step window; write A-B (steps A to B, 1-based) or A");
    return std::stoll(part);
  };
  const auto dash = s.find('-');
  const int64_t a = number(s.substr(0, dash));
  const int64_t b = dash == std::string::npos ? a : number(s.substr(dash + 1));
  VESCALE_CHECK(a >= 1 && b >= a, "'", s, "' must have 1 <= A <= B (steps are 1-based)");
  VESCALE_CHECK(a <= train_steps, "'", s,
                "' starts after the last step (train.steps = ", train_steps, "); pick steps up to ",
                train_steps);
  return {a, std::min(b, train_steps)};
}

}  // namespace vescale::train
