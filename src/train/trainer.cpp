#include "vescale/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <glob.h>
#include <torch/nn/module.h>
#include <torch/utils.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <functional>
#include <random>

#include "vescale/checkpoint/distributed_checkpoint.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/world.h"
#include "vescale/optim/clip_grad.h"
#include "vescale/optim/lr_schedule.h"
#include "vescale/ddp/grad_reduce.h"
#include "vescale/ddp/grad_reducer.h"
#include "vescale/ddp/zero_optimizer.h"
#include "vescale/optim/adamw.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/plan/parallelize.h"
#include "vescale/plan/plan.h"
#include "vescale/random/random.h"
#include "vescale/train/activation_checkpoint.h"
#include "vescale/train/cross_entropy.h"
#include "vescale/train/memory_stats.h"
#include "vescale/train/stop_signal.h"
#include "vescale/nn/module_hooks.h"

namespace vescale::train {
namespace {

// Where the trainer meets parallelize(). Everything else in this file is plain aten code that
// works unchanged on DTensors.
//
// The parameters become DTensors under the config's plan (every parameter replicated without
// one) and the model's own init reruns on them through the Philox RNG, so the initial weights
// are bitwise the same for every mesh, world size and plan. On one device the parameters stay
// plain tensors (after that same init): nothing to distribute, no DTensor dispatch per op.
plan::Plan parallelize_model(Model& model, const Config& config, const mesh::DeviceMesh& mesh) {
  plan::Plan plan(mesh.dim_names());
  if (config.parallel.plan.empty()) {
    plan.shard("*", dtensor::Placements(mesh.ndim(), dtensor::Replicate()));
  } else {
    plan = plan::Plan::from_json_file(config.parallel.plan);
  }
  plan::parallelize(*model.module, plan, mesh, {.init = model.init, .plain_on_one_device = true});
  return plan;
}

// The ZeRO stage: the config's, else the plan's; both set must agree.
int64_t zero_stage(const ParallelConfig& parallel, const plan::Plan* plan) {
  if (plan == nullptr || plan->zero() == 0) return parallel.zero;
  VESCALE_CHECK(parallel.zero == 0 || plan->zero() == parallel.zero, "parallel.zero=", parallel.zero, " but the plan ",
                plan->source(), " says zero=", plan->zero(), "; set one of them, or make them agree");
  return plan->zero();
}

// This rank's [batch, seq_len] token block is its part of the global batch: rows split over
// the data-parallel dim (the loader already gave each dp rank its own rows), replicated over
// the others.
at::Tensor to_model_input(const at::Tensor& local_tokens, const mesh::DeviceMesh* mesh) {
  if (mesh == nullptr || mesh->size() == 1) return local_tokens;
  dtensor::Placements placements(mesh->ndim(), dtensor::Replicate());
  auto global = local_tokens.sizes().vec();
  const auto& names = mesh->dim_names();
  for (size_t d = 0; d < names.size(); ++d) {
    if (names[d] != "dp") continue;
    placements[d] = dtensor::Shard(0);
    global[0] *= mesh->size("dp");
  }
  return dtensor::from_local(local_tokens, *mesh, placements, global);
}
// ===================================================================================


// An exception's message without libtorch's C++ stack (kept at --log-level debug).
std::string message_of(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) {
    if (log::level() == "debug" || log::level() == "trace") return c->what();
    std::string m = c->what_without_backtrace();
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    return m;
  }
  return e.what();
}

// Runs `f` on every rank; when it throws on any, it throws on every rank: the failing rank its
// own error, the others that rank's message. So no rank goes on (say, logs success, or waits in
// the next collective) while another has failed. Collective.
void on_all_ranks(const std::function<void()>& f) {
  std::string mine;
  try {
    f();
  } catch (const std::exception& e) {
    mine = message_of(e);
    if (mine.empty()) mine = "failed";
  }
  const auto all = dist::all_gather_text(mine);
  if (!mine.empty()) throw Error(mine);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) throw Error("rank " + std::to_string(r) + " failed: " + all[r]);
}

// A folder the run will write into: made if missing, then a file created and removed in it.
void check_writable_dir(const std::string& dir, const std::string& field) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  VESCALE_CHECK(!ec && fs::is_directory(dir), field, " '", dir, "' cannot be created: ",
                ec ? ec.message() : "a file of that name exists", "; choose a folder this user can write");
  const fs::path probe = fs::path(dir) / (".vescale-write-test." + std::to_string(::getpid()));
  {
    std::ofstream out(probe);
    out << "ok";
    out.flush();
    VESCALE_CHECK(out.good(), field, " '", dir, "' is not writable (read-only file system, or no permission); ",
                  "choose a folder this user can write");
  }
  fs::remove(probe, ec);
}

// A fresh run's id: checkpoints carry it, and `keep` prunes only its own run's.
std::string new_run_id() {
  std::random_device rd;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%lld-%08x",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count()),
                rd());
  return buf;
}

std::string exe_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  return std::filesystem::path(buf).parent_path().string();
}

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

std::string human(double x, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int k = 0;
  while (std::fabs(x) >= 1000 && k < 5) x /= 1000, ++k;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f%s%s", x, prefixes[k], unit);
  return buf;
}

std::string gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::string hms(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds));
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

}  // namespace

std::vector<std::string> data_files(const DataConfig& data, const std::string& split) {
  const auto& patterns = split == "train" ? data.train : data.val;
  if (data.train.empty() && data.val.empty()) {
    // The built-in corpus, tokenized by the build next to our binaries (data/README.md).
    const char* env = std::getenv("VESCALE_DATA_DIR");
    const std::string dir = env ? env : exe_dir() + "/../data";
    const std::string path = dir + "/corpus_" + split + ".bin";
    VESCALE_CHECK(std::filesystem::exists(path), "data: the config names no files, and the built-in corpus '", path,
                  "' is missing; build it (cmake --build build --target builtin_data) or set data.train and data.val");
    return {std::filesystem::path(path).lexically_normal().string()};
  }
  std::vector<std::string> files;
  for (const auto& p : patterns) {
    auto matched = expand_glob(p);
    VESCALE_CHECK(!matched.empty(), "data.", split, ": '", p, "' matches no file");
    files.insert(files.end(), matched.begin(), matched.end());
  }
  return files;
}

Trainer::Trainer(Config config, std::optional<mesh::DeviceMesh> mesh) : config_(std::move(config)), mesh_(std::move(mesh)) {
  const auto& t = config_.train;
  if (mesh_) {
    rank_ = mesh_->rank();
    world_size_ = mesh_->size();
    const auto& names = mesh_->dim_names();
    if (std::find(names.begin(), names.end(), "dp") != names.end()) {
      dp_rank_ = mesh_->coordinate("dp");
      dp_size_ = mesh_->size("dp");
    }
    device_ = dist::device_string();
  }
  on_all_ranks([&] { check_outputs(); });
  // One seed for everything: libtorch's generator (model init, plain-tensor dropout) and ours.
  torch::manual_seed(t.seed);
  random::manual_seed(t.seed);

  if (device_ == "cpu") cache_host_memory();
  model_ = build_model(config_.model);
  if (device_ != "cpu") model_.module->to(at::Device(device_));
  int64_t zero = 0;
  if (mesh_) {
    const plan::Plan plan = parallelize_model(model_, config_, *mesh_);
    // Bucketed reduction (docs/ddp.md); "per_param" keeps ddp::reduce_gradients.
    zero = zero_stage(config_.parallel, &plan);
    VESCALE_CHECK(zero == 0 || config_.parallel.grad_reduce != "per_param", "ZeRO stage ", zero, " (from ",
                  config_.parallel.zero > 0 ? "parallel.zero" : plan.source(),
                  ") needs the bucketed reducer: set parallel.grad_reduce to overlap or bucketed");
    // One device has no gradient to reduce (and its parameters are plain tensors).
    if (mesh_->size() > 1 && config_.parallel.grad_reduce != "per_param") {
      auto opts = ddp::GradReducerOptions::from_plan(plan.grad_reduce());
      opts.overlap = config_.parallel.grad_reduce == "overlap";
      opts.zero = static_cast<int>(zero);
      if (zero >= 3) opts.unit_pattern = model_.block_pattern;  // one gather per transformer block
      opts.reduce_bf16 = config_.parallel.reduce_dtype == "bf16";
      reducer_ = std::make_unique<ddp::GradReducer>(*model_.module, *mesh_, opts);
    }
  }
  dtensor::set_static_eager(config_.parallel.static_eager);
  if (t.activation_checkpointing)
    enable_activation_checkpointing(*model_.module, model_.block_pattern, model_.block_side_outputs);

  optim::NamedParams named;
  for (const auto& item : model_.module->named_parameters()) named.emplace_back(item.key(), item.value());
  std::vector<at::Tensor> params;  // the model's order, for the norm's summation
  for (const auto& [n, p] : named) params.push_back(p);
  const optim::AdamWOptions adamw{.lr = t.lr, .beta1 = t.betas[0], .beta2 = t.betas[1], .eps = t.eps};
  if (zero >= 1 && reducer_) {
    optimizer_ = std::make_unique<ddp::ZeroOptimizer>(*reducer_, optim::decay_groups(named, t.weight_decay), adamw);
  } else {
    optimizer_ = std::make_unique<optim::AdamW>(optim::decay_groups(named, t.weight_decay), adamw, params);
  }

  auto train_data = std::make_shared<TokenDataset>(data_files(config_.data, "train"));
  train_loader_ = std::make_unique<DataLoader>(train_data, t.batch_size, t.seq_len, dp_rank_, dp_size_, t.seed,
                                               config_.data.shuffle);
  train_loader_->set_vocab_size(config_.model.vocab_size());
  VESCALE_CHECK(train_loader_->steps_per_epoch() >= 1, "data.train: ", train_data->size(), " tokens are too few for one ",
                "batch of ", t.batch_size, " x ", t.seq_len, " on each of ", dp_size_, " data-parallel ranks");
  const bool has_val = !config_.data.val.empty() || config_.data.train.empty();
  if (has_val) {
    auto val_data = std::make_shared<TokenDataset>(data_files(config_.data, "val"));
    val_loader_ = std::make_unique<DataLoader>(val_data, t.batch_size, t.seq_len, dp_rank_, dp_size_, t.seed, false);
    val_loader_->set_vocab_size(config_.model.vocab_size());
    if (val_loader_->steps_per_epoch() < 1) val_loader_.reset();  // too small to evaluate on
  }
  flops_per_token_ = flops_per_token(config_.model, t.seq_len);
  guard_ = std::make_unique<DivergenceGuard>(DivergenceGuardOptions{
      t.max_loss_spike, t.warmup_steps, config_.model.vocab_size(), t.lr, t.grad_clip});
  if (!config_.checkpoint.dir.empty()) {
    saver_ = std::make_unique<checkpoint::AsyncSave>();
    if (config_.checkpoint.resume) {
      if (auto folder = checkpoint::latest(config_.checkpoint.dir)) resume_from(*folder);
    }
    // Resumed: the checkpoint's run goes on. Fresh: a new id, the same on every rank.
    if (!resumed_) run_id_ = dist::all_gather_text(rank_ == 0 ? new_run_id() : "").front();
  }
  if (rank_ == 0 && !config_.log.metrics_jsonl.empty()) open_metrics();
}

// Everything the run will write, checked before the first step (not at the first save, after
// hours of training): the checkpoint folder on every rank (each writes its own file), the
// metrics file on rank 0; a used checkpoint folder without resume; stale unfinished saves.
void Trainer::check_outputs() {
  const auto& ck = config_.checkpoint;
  if (!ck.dir.empty()) {
    check_writable_dir(ck.dir, "checkpoint.dir");
    if (!ck.resume && !ck.overwrite && checkpoint::has_checkpoints(ck.dir)) {
      const auto at = checkpoint::latest(ck.dir);
      VESCALE_FAIL("checkpoint.dir '", ck.dir, "' already holds checkpoints", at ? " (latest: " + *at + ")" : "",
                   " and checkpoint.resume is false. Resume them (checkpoint.resume=true), choose an empty ",
                   "checkpoint.dir, or set checkpoint.overwrite=true to write this run's beside them");
    }
    if (rank_ == 0) {
      for (const auto& stale : checkpoint::remove_stale_saves(ck.dir))
        log::info("checkpoint: removed " + stale + ", an unfinished save older than the newest checkpoint");
    }
  }
  if (rank_ == 0 && !config_.log.metrics_jsonl.empty()) {
    const auto parent = std::filesystem::path(config_.log.metrics_jsonl).parent_path();
    check_writable_dir(parent.empty() ? "." : parent.string(), "log.metrics_jsonl's folder");
  }
}

// A resumed run keeps the lines of the steps it did not redo and appends.
void Trainer::open_metrics() {
  const auto& path = config_.log.metrics_jsonl;
  std::vector<std::string> kept;
  if (resumed_step_ > 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      try {
        if (nlohmann::json::parse(line).value("step", int64_t{0}) <= resumed_step_) kept.push_back(line);
      } catch (const nlohmann::json::exception&) {
        // a torn last line of a crashed run
      }
    }
  }
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  metrics_ = std::make_unique<std::ofstream>(path, std::ios::trunc);
  VESCALE_CHECK(metrics_->good(), "log.metrics_jsonl: cannot write '", path, "'");
  for (const auto& line : kept) *metrics_ << line << '\n';
  metrics_->flush();
}

// Checkpoints --------------------------------------------------------------------------------

namespace {
at::Generator torch_generator(const std::string& device) {
  return at::globalContext().defaultGenerator(at::Device(device));
}

}  // namespace

checkpoint::StateDict Trainer::checkpoint_state(std::vector<checkpoint::Piece>& pieces) {
  checkpoint::StateDict s;
  optimizer_->gather_params();  // ZeRO-3: whole parameters to copy (released again at their next use)
  for (const auto& item : model_.module->named_parameters()) s["model/" + item.key()] = item.value();
  auto optim_state = optimizer_->state_to_save();
  for (auto& [k, v] : optim_state.tensors) s["optim/" + k] = v;
  for (auto& p : optim_state.pieces) {
    p.name = "optim/" + p.name;
    pieces.push_back(std::move(p));
  }
  auto gen = torch_generator(device_);
  std::lock_guard<std::mutex> lock(gen.mutex());
  s["rng/torch"] = gen.get_state();
  return s;
}

void Trainer::save_checkpoint(int64_t steps_done) {
  stage_checkpoint(steps_done);
  if (!config_.checkpoint.async) finish_checkpoint();
}

void Trainer::stage_checkpoint(int64_t steps_done) {
  VESCALE_CHECK(saver_, "save_checkpoint: checkpoint.dir is not set");
  finish_checkpoint();
  const auto start = std::chrono::steady_clock::now();
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(steps_done));
  const auto rng = random::get_state();
  const auto pos = train_loader_->position();
  const nlohmann::json meta{{"step", steps_done},
                            {"model", config_.model.type},
                            {"train_loader", {{"epoch", pos.epoch}, {"step", pos.step}}},
                            {"global_batch", config_.train.batch_size * dp_size_},
                            {"philox", {{"seed", rng.seed}, {"offset", rng.offset}}}};
  std::vector<checkpoint::Piece> pieces;
  const auto state = checkpoint_state(pieces);
  saver_->begin(config_.checkpoint.dir, name, state, meta.dump(), pieces);
  if (rank_ == 0) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    char line[256];
    std::snprintf(line, sizeof(line), "checkpoint %s/%s: staged in %.0f ms%s", config_.checkpoint.dir.c_str(), name, ms,
                  config_.checkpoint.async ? ", writing in the background" : "");
    log::info(line);
  }
  if (!config_.checkpoint.async) saver_->wait();
}

void Trainer::finish_checkpoint() {
  if (!saver_ || !saver_->pending()) return;
  const std::string folder = saver_->commit(config_.checkpoint.keep, run_id_);
  if (rank_ == 0) log::info("checkpoint " + folder + ": saved");
}

// The optimizer's part of a checkpoint ("optim/..."), once the optimizer can take it.
void Trainer::load_optimizer_state(const std::string& folder) {
  const auto info = checkpoint::read_info(folder);
  std::map<std::string, std::vector<int64_t>> saved;
  for (const auto& [key, entry] : info.tensors)
    if (key.rfind("optim/", 0) == 0) saved[key.substr(6)] = entry.shape;
  auto targets = optimizer_->state_to_load(saved);
  checkpoint::StateDict state;
  for (auto& [k, v] : targets.tensors) state["optim/" + k] = v;
  for (auto& p : targets.pieces) p.name = "optim/" + p.name;
  on_all_ranks([&] { checkpoint::load(folder, state, targets.pieces); });
  optimizer_->loaded();
  optimizer_resume_.clear();
}

void Trainer::resume_from(const std::string& folder) {
  const auto info = checkpoint::read_info(folder);
  const auto meta = nlohmann::json::parse(info.metadata);
  VESCALE_CHECK(meta.contains("step") && meta.contains("train_loader") && meta.contains("philox"), "checkpoint ",
                folder, ": its metadata lacks the step, data position or RNG state; not written by vescale-train");
  VESCALE_CHECK(meta.value("model", config_.model.type) == config_.model.type, "checkpoint ", folder, " holds a ",
                meta.value("model", std::string()), " model but model.type is ", config_.model.type,
                "; point checkpoint.dir elsewhere or set checkpoint.resume=false");
  optimizer_->gather_params();  // ZeRO-3: whole parameters to load into
  checkpoint::StateDict state;
  for (const auto& item : model_.module->named_parameters()) state["model/" + item.key()] = item.value();
  auto gen = torch_generator(device_);
  at::Tensor torch_rng;
  if (info.tensors.count("rng/torch")) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    torch_rng = at::empty_like(gen.get_state());
    state["rng/torch"] = torch_rng;
  }
  on_all_ranks([&] { checkpoint::load(folder, state); });
  optimizer_->params_loaded();
  // ZeRO 1/2 lay out their slices at the first step's GradReducer::finish(): their state is
  // loaded then (step()); the others' now.
  optimizer_resume_ = folder;
  if (optimizer_->ready_to_load()) load_optimizer_state(folder);
  if (torch_rng.defined()) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(torch_rng);
  }
  random::set_state({meta["philox"].at("seed").get<uint64_t>(), meta["philox"].at("offset").get<uint64_t>()});
  // The position counts global batches; another dp size or batch size maps it through samples.
  LoaderPosition pos{meta["train_loader"].at("epoch").get<int64_t>(), meta["train_loader"].at("step").get<int64_t>()};
  const int64_t saved_batch = meta.value("global_batch", config_.train.batch_size * dp_size_);
  const int64_t batch = config_.train.batch_size * dp_size_;
  VESCALE_CHECK(pos.step * saved_batch % batch == 0, "checkpoint ", folder, ": it stopped after ", pos.step * saved_batch,
                " samples of epoch ", pos.epoch, ", not a whole number of this run's global batches of ", batch,
                " (train.batch_size x dp); choose a batch size that divides it");
  pos.step = pos.step * saved_batch / batch;
  train_loader_->seek(pos);
  resumed_step_ = meta["step"].get<int64_t>();
  run_id_ = info.run_id;
  resumed_ = true;
  if (rank_ == 0) log::info("resumed from " + folder + " after step " + std::to_string(resumed_step_));
}

Trainer::~Trainer() {
  optimizer_.reset();  // ZeRO before the reducer it steps
  reducer_.reset();
  if (config_.train.activation_checkpointing) vescale::nn::clear_all_forward_hooks();
}

int64_t Trainer::tokens_per_step() const {
  const auto& t = config_.train;
  return t.batch_size * t.seq_len * t.grad_accum * dp_size_;
}

at::Tensor Trainer::loss_of(const DataLoader::Batch& batch) {
  const at::Device dev(device_);
  const mesh::DeviceMesh* m = mesh_ ? &*mesh_ : nullptr;
  at::Tensor inputs = to_model_input(batch.inputs.to(dev), m);
  at::Tensor targets = to_model_input(batch.targets.to(dev), m);
  at::Tensor logits;
  const bool bf16 = config_.train.dtype == "bf16";
  const at::DeviceType dt = dev.type();
  if (bf16) {
    at::autocast::set_autocast_dtype(dt, at::kBFloat16);
    at::autocast::set_autocast_enabled(dt, true);
  }
  try {
    logits = model_.forward(inputs);
  } catch (...) {
    if (bf16) at::autocast::set_autocast_enabled(dt, false), at::autocast::clear_cache();
    throw;
  }
  if (bf16) at::autocast::set_autocast_enabled(dt, false), at::autocast::clear_cache();
  // The loss in fp32 whatever the compute dtype (fused on CPU: train/cross_entropy.h).
  at::Tensor loss = cross_entropy(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape({-1}));
  if (model_.aux_loss) loss = loss + model_.aux_loss();
  return loss;
}

StepMetrics Trainer::step(int64_t step) {
  const auto& t = config_.train;
  const auto start = std::chrono::steady_clock::now();
  doing_ = "starting the step";
  dtensor::static_eager_step();  // replay (when on) restarts at the step's first call
  const double lr = optim::lr_at({t.lr, t.min_lr, t.warmup_steps, t.steps, t.decay}, step);
  optimizer_->set_lr(lr);
  model_.module->train();
  at::Tensor loss_sum;
  dtensor::BackwardOnCallerThread same_thread;  // no hand-offs to autograd's "dtensor" device thread
  for (int64_t micro = 0; micro < t.grad_accum; ++micro) {
    // Only the last micro-batch's backward reduces; the others accumulate Partial grads.
    if (reducer_) reducer_->set_sync(micro + 1 == t.grad_accum);
    doing_ = "reading the batch";
    const auto batch = train_loader_->next();
    doing_ = "forward";
    at::Tensor loss = loss_of(batch);
    doing_ = "backward";
    (loss / static_cast<double>(t.grad_accum)).backward();
    loss_sum = loss_sum.defined() ? loss_sum + loss.detach() : loss.detach();
  }
  // Gradients with other placements than their parameters (Partial over dp, or over tp for
  // replicated weights fed sequence shards) are reduced: by the buckets (most of them already
  // launched during backward), or one collective per parameter.
  doing_ = "reducing gradients";
  if (reducer_) {
    reducer_->finish();
    if (!optimizer_resume_.empty()) load_optimizer_state(optimizer_resume_);
  } else if (mesh_ && mesh_->size() > 1) {
    ddp::reduce_gradients(*model_.module);
  }
  // The norm of the whole gradient, however it is sharded (ZeRO holds slices of it).
  doing_ = "clipping gradients";
  at::Tensor norm = optimizer_->clip_grad_norm_(t.grad_clip);
  // The one host read per step: the loss and the norm, for the log and the guard.
  StepMetrics m;
  m.step = step + 1;
  m.lr = lr;
  m.loss = (loss_sum / static_cast<double>(t.grad_accum)).item<double>();
  m.grad_norm = norm.item<double>();
  // Every rank holds the same loss and norm, so all pass or all stop here.
  guard_->check(m.step, m.loss, m.grad_norm);
  // The parameters of the save in flight gave this loss: that checkpoint may become latest.
  doing_ = "committing a checkpoint";
  finish_checkpoint();
  doing_ = "optimizer step";
  optimizer_->step();
  optimizer_->zero_grad();
  m.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  m.tokens_per_s = static_cast<double>(tokens_per_step()) / (m.step_ms / 1000.0);
  if (t.peak_flops > 0)
    m.mfu = flops_per_token_ * m.tokens_per_s / (t.peak_flops * static_cast<double>(world_size_));
  return m;
}

double Trainer::evaluate() {
  VESCALE_CHECK(val_loader_, "evaluate: no validation data (data.val names no files, or they hold less than a batch)");
  c10::NoGradGuard no_grad;
  model_.module->eval();
  val_loader_->seek({});
  const int64_t n = std::min(config_.train.eval_steps, val_loader_->steps_per_epoch());
  at::Tensor sum;
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor loss = loss_of(val_loader_->next());
    sum = sum.defined() ? sum + loss : loss;
  }
  model_.module->train();
  return (sum / static_cast<double>(n)).item<double>();
}

void Trainer::log_step(const StepMetrics& m) {
  if (metrics_) {
    nlohmann::ordered_json j{{"step", m.step},           {"loss", m.loss},
                             {"lr", m.lr},               {"grad_norm", m.grad_norm},
                             {"step_ms", m.step_ms},     {"tokens", m.step * tokens_per_step()},
                             {"tokens_per_s", m.tokens_per_s}};
    if (config_.train.peak_flops > 0) j["mfu"] = m.mfu;
    if (m.val_loss) j["val_loss"] = *m.val_loss;
    *metrics_ << j.dump() << '\n';
    metrics_->flush();
  }
}

std::vector<StepMetrics> Trainer::run() {
  const auto& t = config_.train;
  if (rank_ == 0) {
    log::info("model " + config_.model.type + ": " + human(static_cast<double>(parameter_count(parameter_shapes(config_.model))), "") +
              " parameters; " + std::to_string(tokens_per_step()) + " tokens per step (" + std::to_string(t.batch_size) + " x " +
              std::to_string(t.seq_len) + " x " + std::to_string(t.grad_accum) + " accum x " + std::to_string(dp_size_) +
              " dp); " + std::to_string(t.steps) + " steps, dtype " + t.dtype +
              (t.activation_checkpointing ? ", activation checkpointing" : ""));
  }
  std::vector<StepMetrics> all;
  double window_ms = 0;
  int64_t window = 0;
  bool warned_mfu = false;
  const auto start = std::chrono::steady_clock::now();
  if (resumed_step_ >= t.steps) {
    if (rank_ == 0) log::info("nothing to do: the checkpoint is at step " + std::to_string(resumed_step_) +
                              " and train.steps is " + std::to_string(t.steps));
    return {};
  }
  // A failure is one line naming the step and what it was doing; a save in flight is dropped.
  auto guarded = [&](int64_t s, auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      if (saver_) saver_->abort();
      const std::string msg = message_of(e);
      if (dynamic_cast<const TimeoutError*>(&e) || msg.rfind("step ", 0) == 0) throw;
      throw Error("step " + std::to_string(s + 1) + ": " + doing_ + ": " + msg);
    }
  };
  for (int64_t s = resumed_step_; s < t.steps; ++s) {
    StepMetrics m;
    int stop = 0;
    guarded(s, [&] {
      // The previous step's save writes in the background; this step commits it once its loss
      // passed the guard. A step that fails throws before that, and the save is dropped.
      m = step(s);
      // Every rank stops after the same step, whichever got the signal. Collective.
      doing_ = "agreeing on a stop";
      stop = static_cast<int>(dist::all_max(stop_requested()));
    });
    const bool last = s + 1 == t.steps || stop != 0;
    if (val_loader_ && ((t.eval_every > 0 && m.step % t.eval_every == 0) || s + 1 == t.steps)) {
      guarded(s, [&] {
        doing_ = "evaluating";
        m.val_loss = evaluate();
      });
    }
    all.push_back(m);
    if (rank_ == 0) log_step(m);
    // Throughput over the steps since the last line (the first step, with its warm-up, is
    // reported on its own).
    window_ms += m.step_ms, ++window;
    if (rank_ == 0 && (m.step % t.log_every == 0 || m.step == 1 || last)) {
      const double ms = window_ms / static_cast<double>(window);
      const double tok_s = static_cast<double>(tokens_per_step()) / (ms / 1000.0);
      char line[512];
      int n = std::snprintf(line, sizeof(line), "step %*lld/%lld | loss %.4f | lr %.2e | norm %.3f | %s tok/s",
                            static_cast<int>(std::to_string(t.steps).size()), static_cast<long long>(m.step),
                            static_cast<long long>(t.steps), m.loss, m.lr, m.grad_norm, human(tok_s, "").c_str());
      if (t.peak_flops > 0) {
        const double device_flops = flops_per_token_ * tok_s / static_cast<double>(world_size_);
        n += std::snprintf(line + n, sizeof(line) - n, " | MFU %.2f%%", 100.0 * device_flops / t.peak_flops);
        if (device_flops > t.peak_flops && !warned_mfu) {
          warned_mfu = true;
          char msg[256];
          std::snprintf(msg, sizeof(msg),
                        "MFU above 100%%: each device reaches %.3g FLOP/s, above train.peak_flops = %.3g; set "
                        "train.peak_flops to the device's peak (e.g. cores x per-core peak on a CPU)",
                        device_flops, t.peak_flops);
          log::warn(msg);
        }
      }
      n += std::snprintf(line + n, sizeof(line) - n, " | %.0f ms/step | ETA %s", ms,
                         hms(ms / 1000.0 * static_cast<double>(t.steps - m.step)).c_str());
      if (m.val_loss) std::snprintf(line + n, sizeof(line) - n, " | val loss %.4f", *m.val_loss);
      log::info(line);
      window_ms = 0, window = 0;
    }
    const auto& ck = config_.checkpoint;
    if (saver_ && ((ck.every > 0 && m.step % ck.every == 0) || last)) {
      guarded(s, [&] {
        doing_ = "saving a checkpoint";
        stage_checkpoint(m.step);
        if (last) finish_checkpoint();  // no next step to wait for
      });
    }
    if (stop != 0) {
      stopped_by_ = stop;
      if (rank_ == 0)
        log::info(std::string(stop == SIGINT ? "SIGINT" : "SIGTERM") + ": stopped after step " +
                  std::to_string(m.step) + (saver_ ? " with a checkpoint; rerun the same command to resume" : ""));
      return all;
    }
  }
  finish_checkpoint();
  if (rank_ == 0) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    log::info("done: " + std::to_string(t.steps) + " steps in " + hms(secs) + "; loss " + std::to_string(all.front().loss) +
              " -> " + std::to_string(all.back().loss) +
              (all.back().val_loss ? ", val loss " + std::to_string(*all.back().val_loss) : std::string()));
  }
  return all;
}

// Dry run ------------------------------------------------------------------------------------

MemoryEstimate memory_per_rank(const Config& config, const mesh::MeshShape& mesh) {
  const ParamShapes shapes = parameter_shapes(config.model);
  std::map<std::string, dtensor::Placements> placements;
  int64_t zero = zero_stage(config.parallel, nullptr);
  if (!config.parallel.plan.empty()) {
    const plan::Plan plan = plan::Plan::from_json_file(config.parallel.plan);
    placements = plan.resolve(mesh.names(), shapes);
    zero = zero_stage(config.parallel, &plan);
  }
  const auto& names = mesh.names();
  const bool has_dp = std::find(names.begin(), names.end(), "dp") != names.end();
  const double dp = has_dp ? static_cast<double>(mesh.size("dp")) : 1.0;
  MemoryEstimate m;
  m.zero = zero;
  m.parameters = parameter_count(shapes);
  for (const auto& [name, shape] : shapes) {
    std::vector<int64_t> local = shape;
    bool replicated_on_dp = true;
    auto it = placements.find(name);
    if (it != placements.end()) {
      for (size_t i = 0; i < it->second.size(); ++i) {
        const auto& p = it->second[i];
        if (!p.is_shard()) continue;
        const int64_t k = mesh.sizes()[i];
        local[p.dim] = (local[p.dim] + k - 1) / k;
        if (names[i] == "dp") replicated_on_dp = false;
      }
    }
    double n = 1;
    for (int64_t d : local) n *= static_cast<double>(d);
    const double zdiv = replicated_on_dp ? dp : 1.0;
    m.param_bytes += 4 * n / (zero >= 3 ? zdiv : 1.0);
    m.grad_bytes += 4 * n / (zero >= 2 ? zdiv : 1.0);
    // ZeRO keeps an fp32 copy of its parameter slice beside the moments (docs/ddp.md).
    m.optimizer_bytes += (zero >= 1 ? 12 : 8) * n / (zero >= 1 ? zdiv : 1.0);
  }
  return m;
}

std::string dry_run_report(const Config& config, const mesh::MeshShape& mesh) {
  const MemoryEstimate m = memory_per_rank(config, mesh);
  const auto& names = mesh.names();
  char count[64];
  std::snprintf(count, sizeof(count), "%.2fB", static_cast<double>(m.parameters) / 1e9);
  std::string mesh_line;
  for (size_t i = 0; i < names.size(); ++i)
    mesh_line += (i ? ", " : "") + names[i] + "=" + std::to_string(mesh.sizes()[i]);
  std::string out;
  out += "model: " + config.model.type + ", " + count + " parameters (" + std::to_string(m.parameters) + ")\n";
  out += "mesh: " + mesh_line + " (" + std::to_string(mesh.numel()) + " ranks)\n";
  out += "plan: " + (config.parallel.plan.empty() ? std::string("none (every parameter replicated)") : config.parallel.plan) +
         "; zero " + std::to_string(m.zero) + "\n";
  out += "per rank (fp32 weights; AdamW exp_avg + exp_avg_sq, under ZeRO plus an fp32 slice of the weights): params " + gib(m.param_bytes) + ", grads " +
         gib(m.grad_bytes) + ", optimizer " + gib(m.optimizer_bytes) + ", total " +
         gib(m.param_bytes + m.grad_bytes + m.optimizer_bytes) + " (activations not counted)\n";
  return out;
}

}  // namespace vescale::train
