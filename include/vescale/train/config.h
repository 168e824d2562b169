// The train config: one JSON file with sections model, parallel, train, data, checkpoint, log
// (docs/train.md lists every field). Every field has a default, so a file names only what it
// changes. Unknown keys and wrong types are errors naming the file and the full key path
// ("train.stpes: unknown key; did you mean train.steps?"); `--set a.b=v` overrides apply to
// the JSON before it is read, so they get the same checks.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vescale/models/registry.h"  // models/: the model families
#include "vescale/common/number_or_auto.h"
#include "vescale/optim/lr_schedule.h"
#include "vescale/plan/schedule_kind.h"

namespace vescale::train {

// The config's named values, parsed once when it is read (config.cpp): the rest of the code
// compares enums, never the strings.
enum class DType { Fp32, Bf16 };
enum class GradReduce {
  Overlap,   // buckets all-reduced during backward
  Bucketed,  // buckets all-reduced after backward
  PerParam,  // one collective per parameter (no buckets, so no ZeRO)
};
const char* to_string(DType d);         // "fp32", "bf16"
const char* to_string(GradReduce g);    // "overlap", "bucketed", "per_param"
const char* to_string(optim::Decay d);  // "cosine", "linear", "constant"
// A dtype named on a command line (vescale-convert --dtype): "fp32" or "bf16"; throws naming
// `what` and the choices.
DType parse_dtype(const std::string& name, const std::string& what);

// model: model.type picks the family in the model registry (models/registry.h), whose options
// struct holds the other model.* fields (models/gpt/gpt_options.h, llama/llama_options.h,
// mixtral/mixtral_options.h; docs/train.md lists them).
struct ModelConfig {
  std::string type = "gpt";
  std::shared_ptr<models::ModelOptions> options;  // never null; the family's defaults at first
  // A Hugging Face folder (config.json, model.safetensors or a sharded index) whose weights the
  // model starts from, under any plan and mesh; its config must agree with model.* unless
  // from_hf_config, which takes model.* from it. Relative: next to the config, then the working
  // directory.
  std::string init_from;
  bool from_hf_config = false;

  ModelConfig();
  ModelConfig(const ModelConfig& other);  // copies the options, not the pointer
  ModelConfig& operator=(const ModelConfig& other);
  ModelConfig(ModelConfig&&) = default;
  ModelConfig& operator=(ModelConfig&&) = default;

  // The family's options struct: config.model.as<models::LlamaOptions>().dim.
  template <class T>
  const T& as() const {
    return options->as<T>();
  }
  template <class T>
  T& as() {
    return options->as<T>();
  }
  int64_t max_seq_len() const { return options->max_seq_len(); }  // the longest sequence
  int64_t vocab_size() const { return options->vocab_size(); }
};

// --set parallel.pipeline.*: fields that replace the plan's "pipeline" section's
// (docs/pipeline.md); unset fields keep the plan's.
struct PipelineOverrides {
  std::optional<plan::ScheduleKind> schedule;
  int64_t microbatches = 0;          // 0: the plan's (or derived from train.global_batch_size)
  int64_t chunks = 0;                // 0: the plan's
  std::string split;                 // "even": balance the layers (drops the plan's "stages")
  std::vector<std::string> stages;   // the first layer of each stage (replaces "split")
  bool any() const {
    return schedule || microbatches || chunks || !split.empty() || !stages.empty();
  }
};

struct ParallelConfig {
  // Mesh dims in order, e.g. {"dp": 2, "tp": 2}; one size may be -1 (the rest of the world).
  std::vector<std::pair<std::string, int64_t>> mesh = {{"dp", -1}};
  // Sharding plan (JSON); empty means every parameter is replicated. A relative path is looked
  // up next to the config file first, then in the working directory; stored resolved. "auto":
  // vescale-train asks the planner for the world it was launched into (docs/planner.md).
  std::string plan;
  // With plan "auto": the device profile the planner uses (h100, h200, a100, b200, a profile
  // file), or "auto": measure this machine at start (vescale-plan --calibrate's measurement).
  std::string plan_device = "auto";
  bool auto_plan() const { return plan == "auto"; }
  bool static_eager = false;  // replay recorded DTensor dispatch after the first steps
  int64_t zero = 0;           // ZeRO stage 0-3 (docs/parallel.md); 0 defers to the plan's "zero"
  // How gradients are reduced (docs/parallel.md). Bucket size and N-D fusing come from the
  // plan's grad_reduce.
  GradReduce grad_reduce = GradReduce::Overlap;
  // The dtype fp32 gradients are reduced in: bf16 halves the bytes (bf16 rounding).
  DType reduce_dtype = DType::Fp32;
  PipelineOverrides pipeline;
};

struct TrainConfig {
  int64_t steps = 1000;
  int64_t batch_size = 8;  // sequences per data-parallel rank per micro-batch
  // The same as batch_size, under Megatron-LM's name; set one of them (0: batch_size).
  int64_t micro_batch_size = 0;
  // Sequences per optimizer step over every data rank. Set, it fixes the math whatever the
  // layout: micro-batches per step = global_batch_size / (batch_size x data ranks), for the
  // local loop and a pipeline alike (run_plan.h). 0: batch_size x grad_accum (or the
  // plan's pipeline micro-batches) x data ranks, which changes with the layout.
  int64_t global_batch_size = 0;
  int64_t seq_len = 1024;
  int64_t grad_accum = 1;  // micro-batches per optimizer step (derived with global_batch_size)
  double lr = 3e-4;
  double min_lr = 3e-5;  // the cosine decays to this floor
  int64_t warmup_steps = 100;
  optim::Decay decay = optim::Decay::Cosine;  // after warmup
  double weight_decay = 0.1;
  std::vector<double> betas = {0.9, 0.95};
  double eps = 1e-8;
  double grad_clip = 1.0;  // max global grad norm; 0 turns clipping off
  // Divergence guard: a loss above this many times the median of the last 20 steps (after
  // warmup), or above it times ln(vocab_size) at any step, a collapsed model (a zero gradient,
  // the loss pinned at ln(vocab_size)), or parameters growing 10x in one update stop the run
  // before its update and before the checkpoint it would make; 0 turns these checks off
  // (NaN/inf always stop). train/divergence_guard.h.
  double max_loss_spike = 3.0;
  // Start even when the dry-run estimate of a rank's memory exceeds what its device (or its
  // share of the host) has; by default that is an error before the model is built.
  bool allow_oversubscribe = false;
  uint64_t seed = 1234;
  DType dtype = DType::Fp32;  // bf16: autocast with fp32 master weights
  bool activation_checkpointing = false;
  // One device's dense peak FLOP/s for MFU. "auto": a GPU's from the table in
  // train/peak_flops.h for the training dtype (unknown GPUs: a warning, no MFU); on the CPU a
  // large fp32 GEMM measured at start ("vs measured GEMM peak"). 0 leaves MFU out.
  NumberOrAuto peak_flops;
  // Every sample_every steps (0: never) rank 0 prints sample_tokens tokens generated from
  // sample_prompt (after the validation loss), decoded with data.tokenizer.
  int64_t sample_every = 0;
  std::string sample_prompt = "In the beginning";
  int64_t sample_tokens = 64;
  double sample_temperature = 0.8;
  int64_t log_every = 10;
  int64_t eval_every = 0;  // 0: no evaluation
  int64_t eval_steps = 10;
};

struct DataConfig {
  // llm.c .bin files (globs allowed). Both empty: the built-in corpus (data/README.md).
  // Relative paths: next to the config file first, then the working directory; stored resolved.
  std::vector<std::string> train;
  std::vector<std::string> val;
  bool shuffle = true;
  // The Hugging Face tokenizer.json the token files were made with (vescale-tokenize
  // --tokenizer), for decoding samples and vescale-generate; empty: bytes (vocab 256).
  std::string tokenizer;
};

struct CheckpointConfig {
  std::string dir;     // empty: no checkpoints
  int64_t every = 0;   // steps between checkpoints; 0: only at the end (when dir is set)
  int64_t keep = 0;    // the newest checkpoints kept in dir; 0: all
  bool async = true;   // write in the background while training goes on (docs/checkpoint.md)
  bool resume = true;  // start from dir's latest checkpoint when there is one
  // With resume=false, a dir that holds checkpoints is an error unless this is set: then the new
  // run's checkpoints go beside the old ones (same step names are replaced; keep prunes only
  // the new run's).
  bool overwrite = false;
  // Steps between copies of the state in host memory: this node's launcher's and the next
  // node's (vescale-run's agent: --max-restarts or --nnodes MIN:MAX). A restart loads the newest
  // copy when it is newer than dir's latest; 0: none (docs/fault_tolerance.md).
  int64_t in_memory_every = 0;
};

// The nD timeline (docs/timeline.md): spans of a window of steps, merged into one trace.
struct TimelineConfig {
  std::string steps;      // "5-7" or "5" (1-based, inclusive); empty with `out` set: "2-4"
  std::string out;        // the merged Chrome trace; empty with `steps` set: "timeline.json"
  bool per_rank = false;  // also one file per rank (OUT.rank-N.json) for HolisticTraceAnalysis
  bool on() const { return !steps.empty() || !out.empty(); }
};

struct LogConfig {
  std::string metrics_jsonl;  // one JSON object per step, written by rank 0; empty: none
  // A folder for TensorBoard event files (the same scalars, the samples as text), written by
  // rank 0; empty: none.
  std::string tensorboard;
  std::string level = "info";  // trace | debug | info | warn | error | off
  TimelineConfig timeline;
};

// The timeline's window as [first, last] steps (1-based), clamped to train.steps; {0, -1} when
// the timeline is off. Throws naming log.timeline.steps when it is not "A-B" or "A".
std::pair<int64_t, int64_t> timeline_window(const TimelineConfig& timeline, int64_t train_steps);

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  DataConfig data;
  CheckpointConfig checkpoint;
  LogConfig log;
  std::string source = "<string>";  // where it was read from (for messages)

  // Parses and validates; `overrides` are "a.b.c=value" strings (the value is JSON if it
  // parses, else a string). `base_dir` anchors relative paths (default: the working directory).
  // Throws vescale::Error naming `source` and the key for any problem.
  static Config from_json(const std::string& text, const std::string& source = "<string>",
                          const std::vector<std::string>& overrides = {},
                          const std::string& base_dir = "");
  // Reads the file; relative paths in it resolve against its directory first.
  static Config from_file(const std::string& path, const std::vector<std::string>& overrides = {});

  // Every field, defaults included, as pretty JSON (from_json of it gives the same config).
  std::string to_json() const;
};

}  // namespace vescale::train
