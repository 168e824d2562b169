// The run's checkpoints (checkpoint_manager.h): the checks before the run, resume, save, commit.
#include "vescale/train/checkpoint_manager.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>

#include "train/trainer_internal.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/peer_memory.h"
#include "vescale/dist/progress.h"
#include "vescale/dist/world.h"
#include "vescale/optim/optimizer.h"
#include "vescale/parallel/sharded_parameters.h"
#include "vescale/random/random.h"
#include "vescale/train/token_data.h"

namespace vescale::train {

namespace {

// A fresh run's id ("<unix seconds>-<8 hex>"): checkpoints carry it, `keep` prunes only its own.
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

// The folder of the checkpoint after `step` steps ("step-00000012"), and the step of such a
// folder's name (nullopt for another name).
std::string step_folder(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}
std::optional<int64_t> step_of_folder(const std::string& name) {
  if (name.size() != 13 || name.rfind("step-", 0) != 0 ||
      name.find_first_not_of("0123456789", 5) != std::string::npos)
    return std::nullopt;
  return std::stoll(name.substr(5));
}

at::Generator torch_generator(const std::string& device) {
  return at::globalContext().defaultGenerator(at::Device(device));
}
}  // namespace

// Checked before the first step (not at the first save, after hours of training): every rank
// writes its own file; one run per folder; a used folder only when asked to.
CheckpointManager::CheckpointManager(const Config& config, int rank)
    : config_(config.checkpoint),
      model_type_(config.model.type),
      config_json_(config.to_json()),
      rank_(rank) {
  const auto& ck = config_;
  VESCALE_CHECK(!ck.dir.empty(), "CheckpointManager: checkpoint.dir is not set");
  check_writable_dir(ck.dir, "checkpoint.dir");
  // One run per folder: a second would interleave its saves with ours (rank 0 holds it).
  if (rank_ == 0) {
    lock_ = std::make_unique<checkpoint::RootLock>(ck.dir, "vescale-train");
    if (!lock_->took_over().empty())
      log::warn("checkpoint.dir '" + ck.dir + "': took over the lock of a process that is gone (" +
                lock_->took_over() + ")");
  }
  if (!ck.resume && !ck.overwrite && checkpoint::has_checkpoints(ck.dir)) {
    const auto at = checkpoint::latest(ck.dir);
    VESCALE_FAIL(
        "checkpoint.dir '", ck.dir, "' already holds checkpoints",
        at ? " (latest: " + *at + ")" : "",
        " and checkpoint.resume is false. Resume them (checkpoint.resume=true), choose an empty ",
        "checkpoint.dir, or set checkpoint.overwrite=true to write this run's beside them");
  }
  if (rank_ == 0) {
    for (const auto& stale : checkpoint::remove_stale_saves(ck.dir))
      log::info("checkpoint: removed " + stale +
                ", an unfinished save older than the newest checkpoint");
  }
}

CheckpointManager::~CheckpointManager() = default;

void CheckpointManager::start(const CheckpointParts& parts, const StepBatch& batch) {
  VESCALE_CHECK(parts.model && parts.optimizer && parts.train_loader,
                "CheckpointManager::start: the model, optimizer and train loader are required");
  parts_ = parts;
  batch_ = batch;
  in_memory_ = config_.in_memory_every > 0 && dist::peer_memory_available();
  if (config_.in_memory_every > 0 && !in_memory_ && rank_ == 0)
    log::warn(
        "checkpoint.in_memory_every: no launcher keeps copies for this run (only vescale-run's "
        "agent does: --max-restarts or --nnodes MIN:MAX); only checkpoint.dir is written");
  if (config_.resume) {
    const auto folder = checkpoint::latest(config_.dir);
    if (!resume_from_memory(folder) && folder) resume_from(checkpoint::FolderSource(*folder));
  }
  // Resumed: the checkpoint's run goes on. Fresh: a new id, the same on every rank.
  if (!resumed_) run_id_ = dist::all_gather_text(rank_ == 0 ? new_run_id() : "").front();
}

bool CheckpointManager::due(int64_t step, bool last) const {
  return (config_.every > 0 && step % config_.every == 0) || last;
}

checkpoint::StateDict CheckpointManager::model_state() const {
  checkpoint::StateDict s;
  const Model& model = *parts_.model;
  for (const auto& item : model.module->named_parameters())
    s["model/" + item.key()] = item.value();
  for (auto& [name, buffer] : state_buffers(model)) s["model/" + name] = buffer;
  return s;
}

CheckpointManager::Saved CheckpointManager::collect(int64_t steps_done) const {
  const auto rng = random::get_state();
  const auto pos = parts_.train_loader->position();
  const nlohmann::json meta{{"step", steps_done},
                            {"model", model_type_},
                            {"train_loader", {{"epoch", pos.epoch}, {"step", pos.step}}},
                            {"global_batch", batch_.loader_batch()},
                            {"seq_len", batch_.seq_len},
                            {"sequences_per_step", batch_.sequences()},
                            {"philox", {{"seed", rng.seed}, {"offset", rng.offset}}},
                            {"config", nlohmann::json::parse(config_json_)}};
  // ZeRO-3: whole parameters to copy (released at their next use).
  if (parts_.sharded) parts_.sharded->gather_all();
  Saved saved{model_state(), {}, meta.dump()};
  auto optim_state = parts_.optimizer->state_dict();
  for (auto& [k, v] : optim_state.tensors) saved.state["optim/" + k] = v;
  for (auto& p : optim_state.pieces) {
    p.name = "optim/" + p.name;
    saved.pieces.push_back(std::move(p));
  }
  {
    auto gen = torch_generator(parts_.device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    saved.state["rng/torch"] = gen.get_state();
  }
  return saved;
}

void CheckpointManager::stage(int64_t steps_done) {
  VESCALE_CHECK(parts_.model, "CheckpointManager::stage before start()");
  commit();
  const auto start = std::chrono::steady_clock::now();
  const std::string name = step_folder(steps_done);
  const Saved saved = collect(steps_done);
  saver_.begin(config_.dir, name, saved.state, saved.metadata, saved.pieces);
  staged_step_ = steps_done;
  if (rank_ == 0) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    char line[256];
    std::snprintf(line, sizeof(line), "checkpoint %s/%s: staged in %.0f ms%s", config_.dir.c_str(),
                  name.c_str(), ms, config_.async ? ", writing in the background" : "");
    log::info(line);
  }
  if (!config_.async) saver_.wait();
}

bool CheckpointManager::due_in_memory(int64_t step) const {
  return in_memory_ && step % config_.in_memory_every == 0;
}

void CheckpointManager::stage_in_memory(int64_t steps_done) {
  commit_in_memory();
  const auto start = std::chrono::steady_clock::now();
  const Saved saved = collect(steps_done);
  memory_slot_ = dist::next_slot();  // every rank reads it after the last publication
  snapshot_.begin(saved.state, saved.metadata, saved.pieces,
                  [slot = memory_slot_](const std::string& file, const std::string& bytes) {
                    dist::keep_part(slot, file, bytes);
                  });
  memory_step_ = steps_done;
  if (rank_ == 0) {
    char line[160];
    std::snprintf(
        line, sizeof(line),
        "copy of step %lld: staged in %.0f ms, going to the launchers' memory in the "
        "background",
        static_cast<long long>(steps_done),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    log::info(line);
  }
}

void CheckpointManager::commit_in_memory() {
  if (!snapshot_.pending()) return;
  const std::string index = snapshot_.finish(run_id_);  // every rank's part is kept
  std::string failed;
  if (rank_ == 0) {
    try {
      dist::publish_snapshot(memory_slot_, memory_step_, index);
    } catch (const std::exception& e) {
      failed = message_of(e);
    }
  }
  // Every rank learns whether rank 0 published (none waits on a rank that threw).
  VESCALE_CHECK(dist::all_max(failed.empty() ? 0 : 1) == 0,
                "publishing the copy in memory after step ", memory_step_, " failed on rank 0",
                failed.empty() ? "" : ": " + failed);
  dist::report_checkpoint(std::max(memory_step_, committed_step_));
}

void CheckpointManager::commit() {
  if (!saver_.pending()) return;
  const std::string folder = saver_.commit(config_.keep, run_id_);
  if (rank_ == 0) log::info("checkpoint " + folder + ": saved");
  committed_step_ = staged_step_;
  dist::report_checkpoint(committed_step_);
}

void CheckpointManager::abort() { saver_.abort(); }

bool CheckpointManager::pending() const { return saver_.pending(); }

std::string CheckpointManager::last_good(int64_t failed_step) const {
  const auto at = checkpoint::latest(config_.dir);
  if (!at) return " No checkpoint has been committed yet.";
  // The first step after a resume failed: the weights it ran with are the resumed checkpoint's.
  if (resumed_ && failed_step == resumed_step_ + 1) {
    namespace fs = std::filesystem;
    std::string before;
    for (const auto& e : fs::directory_iterator(config_.dir)) {
      const std::string name = e.path().filename().string();
      if (e.is_directory() && step_of_folder(name) && fs::exists(e.path() / "index.json") &&
          name < fs::path(*at).filename().string() && name > before)
        before = name;
    }
    return " This run resumed from " + *at +
           ", so that checkpoint holds the broken model; the last good one is the one before it" +
           (before.empty()
                ? " (there is none: start over with checkpoint.resume=false and "
                  "checkpoint.overwrite=true)"
                : ", " + before + ": point " + config_.dir + "/latest at it (echo " + before +
                      " > " + config_.dir + "/latest) and rerun.");
  }
  return " The last good checkpoint is " + *at + " (latest).";
}

std::map<std::string, std::vector<int64_t>> CheckpointManager::saved_optimizer_state(
    const checkpoint::CheckpointInfo& info) const {
  std::map<std::string, std::vector<int64_t>> saved;
  // A pipeline stage's optimizer holds its own parameters' state: the other stages' is theirs.
  std::set<std::string> mine;
  const bool stage = parts_.some_layers_only;
  if (stage)
    for (const auto& item : parts_.model->module->named_parameters()) mine.insert(item.key());
  auto owned = [&](const std::string& state_name) {
    const auto dot = state_name.rfind('.');
    return !stage || (dot != std::string::npos && mine.count(state_name.substr(0, dot)));
  };
  for (const auto& [key, entry] : info.tensors)
    if (key.rfind("optim/", 0) == 0 && owned(key.substr(6))) saved[key.substr(6)] = entry.shape;
  return saved;
}

bool CheckpointManager::resume_from_memory(const std::optional<std::string>& folder) {
  if (!in_memory_) return false;  // the same on every rank (the launch env)
  const auto snap = dist::latest_snapshot();
  // The folder's latest step, from its name without reading it (another name: memory loses).
  const int64_t on_disk =
      folder
          ? step_of_folder(std::filesystem::path(*folder).filename().string()).value_or(INT64_MAX)
          : 0;
  // Every rank takes the same way: memory only if all see it newer and every part reachable.
  const bool newer = snap && snap->step > on_disk;
  if (dist::all_max(newer ? 0 : 1) != 0) return false;
  std::vector<std::string> files;
  const auto index = nlohmann::json::parse(snap->index_json);  // alive through the loop
  for (const auto& [file, entry] : index.at("files").items()) files.push_back(file);
  if (dist::all_max(dist::snapshot_reachable(*snap, files) ? 0 : 1) != 0) {
    if (rank_ == 0)
      log::warn("the launchers' memory lost parts of its copy after step " +
                std::to_string(snap->step) + " (two neighbouring nodes gone?): resuming from " +
                (folder ? *folder : std::string("the start")) + " instead");
    return false;
  }
  resume_from(checkpoint::MemoryCheckpoint(
      "the launchers' memory (the copy after step " + std::to_string(snap->step) + ")",
      snap->index_json,
      [kept = *snap](const std::string& file) { return dist::fetch_part(kept, file); }));
  return true;
}

void CheckpointManager::resume_from(const checkpoint::CheckpointSource& source) {
  const std::string& folder = source.label();
  const auto info = checkpoint::read_info(source);
  const auto meta = nlohmann::json::parse(info.metadata);
  VESCALE_CHECK(
      meta.contains("step") && meta.contains("train_loader") && meta.contains("philox"),
      "checkpoint ", folder,
      ": its metadata lacks the step, data position or RNG state; not written by vescale-train");
  VESCALE_CHECK(meta.value("model", model_type_) == model_type_, "checkpoint ", folder,
                " holds a ", meta.value("model", std::string()), " model but model.type is ",
                model_type_, "; point checkpoint.dir elsewhere or set checkpoint.resume=false");
  if (parts_.sharded) parts_.sharded->gather_all();  // ZeRO-3: whole parameters to load into
  auto state = model_state();
  auto gen = torch_generator(parts_.device);
  at::Tensor torch_rng;
  if (info.tensors.count("rng/torch")) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    torch_rng = at::empty_like(gen.get_state());
    state["rng/torch"] = torch_rng;
  }
  // The optimizer's state in the same pass over the files (the layout exists before step 1).
  parts_.optimizer->load_state_dict(
      saved_optimizer_state(info), [&](optim::OptimizerState& targets) {
        for (auto& [k, v] : targets.tensors) state["optim/" + k] = v;
        std::vector<checkpoint::Piece> pieces;
        for (const auto& p : targets.pieces) {
          pieces.push_back(p);
          pieces.back().name = "optim/" + p.name;
        }
        on_all_ranks([&] { checkpoint::load(source, state, pieces); });
      });
  if (torch_rng.defined()) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(torch_rng);
  }
  random::set_state(
      {meta["philox"].at("seed").get<uint64_t>(), meta["philox"].at("offset").get<uint64_t>()});
  // The data position is a count of sequences of seq_len tokens: another length, or another
  // number of sequences per step, would resume elsewhere in the data (and change the math).
  if (meta.contains("seq_len"))
    VESCALE_CHECK(meta["seq_len"].get<int64_t>() == batch_.seq_len, "checkpoint ", folder,
                  " was trained with train.seq_len=", meta["seq_len"].get<int64_t>(),
                  ", this run has ", batch_.seq_len,
                  "; resume with --set train.seq_len=", meta["seq_len"].get<int64_t>(),
                  ", or start a new run in another checkpoint.dir");
  if (meta.contains("sequences_per_step"))
    VESCALE_CHECK(meta["sequences_per_step"].get<int64_t>() == batch_.sequences(), "checkpoint ",
                  folder, " took ", meta["sequences_per_step"].get<int64_t>(),
                  " sequences per step (its global batch), this run takes ", batch_.sequences(),
                  " (train.batch_size ", batch_.batch_size, " x ", batch_.microbatches,
                  " micro-batches x ", batch_.data_ranks,
                  " data ranks); set train.batch_size so that the product is ",
                  meta["sequences_per_step"].get<int64_t>(),
                  ", or start a new run in another checkpoint.dir");
  // The position counts global batches; another dp size or batch size maps it through samples.
  LoaderPosition pos{meta["train_loader"].at("epoch").get<int64_t>(),
                     meta["train_loader"].at("step").get<int64_t>()};
  const int64_t saved_batch = meta.value("global_batch", batch_.loader_batch());
  const int64_t loader_batch = batch_.loader_batch();
  VESCALE_CHECK(pos.step * saved_batch % loader_batch == 0, "checkpoint ", folder,
                ": it stopped after ", pos.step * saved_batch, " samples of epoch ", pos.epoch,
                ", not a whole number of this run's global batches of ", loader_batch,
                " (train.batch_size x dp); choose a batch size that divides it");
  pos.step = pos.step * saved_batch / loader_batch;
  parts_.train_loader->seek(pos);
  resumed_step_ = meta["step"].get<int64_t>();
  run_id_ = info.run_id;
  resumed_ = true;
  committed_step_ = resumed_step_;
  dist::report_checkpoint(resumed_step_);
  if (rank_ == 0)
    log::info("resumed from " + folder + " after step " + std::to_string(resumed_step_));
}

}  // namespace vescale::train
