// The trainer's checkpoints: what it checks before step 1, saves, commits and resumes.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <torch/nn/module.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>

#include "train/trainer_internal.h"
#include "vescale/checkpoint/distributed_checkpoint.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/random/random.h"
#include "vescale/train/forward_backward.h"
#include "vescale/train/trainer.h"
#include "vescale/plan/plan.h"

namespace vescale::train {

namespace {

// A folder the run will write into: made if missing, then a file created and removed in it.
void check_writable_dir(const std::string& dir, const std::string& field) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  VESCALE_CHECK(!ec && fs::is_directory(dir), field, " '", dir,
                "' cannot be created: ", ec ? ec.message() : "a file of that name exists",
                "; choose a folder this user can write");
  const fs::path probe = fs::path(dir) / (".vescale-write-test." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  // A block, not a byte: a full disk often still takes a few bytes.
  const std::string block(4096, 'x');
  const bool ok = fd >= 0 &&
                  ::write(fd, block.data(), block.size()) == static_cast<ssize_t>(block.size()) &&
                  ::fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  fs::remove(probe, ec);
  VESCALE_CHECK(ok, field, " '", dir, "' is not writable: ", std::strerror(err),
                err == ENOSPC ? "; free space on its disk or choose another folder"
                              : "; choose a folder this user can write");
}

}  // namespace

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

// Everything the run will write, checked before the first step (not at the first save, after
// hours of training): the checkpoint folder on every rank (each writes its own file), the
// metrics file on rank 0; a used checkpoint folder without resume; stale unfinished saves.
void Trainer::check_outputs() {
  const auto& ck = config_.checkpoint;
  if (!ck.dir.empty()) {
    check_writable_dir(ck.dir, "checkpoint.dir");
    // One run per folder: a second would interleave its saves with ours (rank 0 holds it).
    if (rank_ == 0) {
      lock_ = std::make_unique<checkpoint::RootLock>(ck.dir, "vescale-train");
      if (!lock_->took_over().empty())
        log::warn("checkpoint.dir '" + ck.dir +
                  "': took over the lock of a process that is gone (" + lock_->took_over() + ")");
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
  // Rank 0 writes the metrics and the merged timeline.
  for (const auto& [path, field] : {std::pair{config_.log.metrics_jsonl, "log.metrics_jsonl"},
                                    std::pair{config_.log.timeline.out, "log.timeline.out"}}) {
    if (rank_ != 0 || path.empty()) continue;
    VESCALE_CHECK(!std::filesystem::is_directory(path), field, " '", path,
                  "' is a folder; name a file");
    const auto parent = std::filesystem::path(path).parent_path();
    check_writable_dir(parent.empty() ? "." : parent.string(), std::string(field) + "'s folder");
  }
}

std::string Trainer::last_good_checkpoint(int64_t failed_step) const {
  if (!saver_) return "";
  const auto at = checkpoint::latest(config_.checkpoint.dir);
  if (!at) return " No checkpoint has been committed yet.";
  // The first step after a resume failed: the weights it ran with are the resumed checkpoint's.
  if (resumed_ && failed_step == resumed_step_ + 1) {
    namespace fs = std::filesystem;
    std::string before;
    for (const auto& e : fs::directory_iterator(config_.checkpoint.dir)) {
      const std::string name = e.path().filename().string();
      if (e.is_directory() && name.rfind("step-", 0) == 0 && name.size() == 13 &&
          fs::exists(e.path() / "index.json") && name < fs::path(*at).filename().string() &&
          name > before)
        before = name;
    }
    return " This run resumed from " + *at +
           ", so that checkpoint holds the broken model; the last good one is the one before it" +
           (before.empty()
                ? " (there is none: start over with checkpoint.resume=false and "
                  "checkpoint.overwrite=true)"
                : ", " + before + ": point " + config_.checkpoint.dir + "/latest at it (echo " +
                      before + " > " + config_.checkpoint.dir + "/latest) and rerun.");
  }
  return " The last good checkpoint is " + *at + " (latest).";
}

// Checkpoints --------------------------------------------------------------------------------

namespace {
at::Generator torch_generator(const std::string& device) {
  return at::globalContext().defaultGenerator(at::Device(device));
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> Trainer::state_buffers() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model_.module->named_buffers())
    for (const auto& pattern : model_.state_buffers)
      if (plan::fqn_match(pattern, item.key())) {
        out.emplace_back(item.key(), item.value());
        break;
      }
  return out;
}

checkpoint::StateDict Trainer::checkpoint_state(std::vector<checkpoint::Piece>& pieces) {
  checkpoint::StateDict s;
  if (sharded_) sharded_->gather_all();  // ZeRO-3: whole parameters to copy (released at next use)
  for (const auto& item : model_.module->named_parameters())
    s["model/" + item.key()] = item.value();
  for (auto& [name, buffer] : state_buffers()) s["model/" + name] = buffer;
  auto optim_state = optimizer_->state_dict();
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
                            {"seq_len", config_.train.seq_len},
                            {"sequences_per_step", sequences_per_step()},
                            {"philox", {{"seed", rng.seed}, {"offset", rng.offset}}},
                            {"config", nlohmann::json::parse(config_.to_json())}};
  std::vector<checkpoint::Piece> pieces;
  const auto state = checkpoint_state(pieces);
  saver_->begin(config_.checkpoint.dir, name, state, meta.dump(), pieces);
  if (rank_ == 0) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    char line[256];
    std::snprintf(line, sizeof(line), "checkpoint %s/%s: staged in %.0f ms%s",
                  config_.checkpoint.dir.c_str(), name, ms,
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

std::map<std::string, std::vector<int64_t>> Trainer::saved_optimizer_state(
    const checkpoint::CheckpointInfo& info) const {
  std::map<std::string, std::vector<int64_t>> saved;
  // A pipeline stage's optimizer holds its own parameters' state: the other stages' is theirs.
  std::set<std::string> mine;
  const bool pipeline = forward_backward_->schedule() != nullptr;
  if (pipeline)
    for (const auto& item : model_.module->named_parameters()) mine.insert(item.key());
  auto owned = [&](const std::string& state_name) {
    const auto dot = state_name.rfind('.');
    return !pipeline || (dot != std::string::npos && mine.count(state_name.substr(0, dot)));
  };
  for (const auto& [key, entry] : info.tensors)
    if (key.rfind("optim/", 0) == 0 && owned(key.substr(6))) saved[key.substr(6)] = entry.shape;
  return saved;
}

void Trainer::resume_from(const std::string& folder) {
  const auto info = checkpoint::read_info(folder);
  const auto meta = nlohmann::json::parse(info.metadata);
  VESCALE_CHECK(
      meta.contains("step") && meta.contains("train_loader") && meta.contains("philox"),
      "checkpoint ", folder,
      ": its metadata lacks the step, data position or RNG state; not written by vescale-train");
  VESCALE_CHECK(meta.value("model", config_.model.type) == config_.model.type, "checkpoint ",
                folder, " holds a ", meta.value("model", std::string()),
                " model but model.type is ", config_.model.type,
                "; point checkpoint.dir elsewhere or set checkpoint.resume=false");
  if (sharded_) sharded_->gather_all();  // ZeRO-3: whole parameters to load into
  checkpoint::StateDict state;
  for (const auto& item : model_.module->named_parameters())
    state["model/" + item.key()] = item.value();
  for (auto& [name, buffer] : state_buffers()) state["model/" + name] = buffer;
  auto gen = torch_generator(device_);
  at::Tensor torch_rng;
  if (info.tensors.count("rng/torch")) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    torch_rng = at::empty_like(gen.get_state());
    state["rng/torch"] = torch_rng;
  }
  // The optimizer's state in the same pass over the files (the layout exists before step 1).
  optimizer_->load_state_dict(saved_optimizer_state(info), [&](optim::OptimizerState& targets) {
    for (auto& [k, v] : targets.tensors) state["optim/" + k] = v;
    std::vector<checkpoint::Piece> pieces;
    for (const auto& p : targets.pieces) {
      pieces.push_back(p);
      pieces.back().name = "optim/" + p.name;
    }
    on_all_ranks([&] { checkpoint::load(folder, state, pieces); });
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
    VESCALE_CHECK(meta["seq_len"].get<int64_t>() == config_.train.seq_len, "checkpoint ", folder,
                  " was trained with train.seq_len=", meta["seq_len"].get<int64_t>(),
                  ", this run has ", config_.train.seq_len,
                  "; resume with --set train.seq_len=", meta["seq_len"].get<int64_t>(),
                  ", or start a new run in another checkpoint.dir");
  if (meta.contains("sequences_per_step"))
    VESCALE_CHECK(meta["sequences_per_step"].get<int64_t>() == sequences_per_step(), "checkpoint ",
                  folder, " took ", meta["sequences_per_step"].get<int64_t>(),
                  " sequences per step (its global batch), this run takes ", sequences_per_step(),
                  " (train.batch_size ", config_.train.batch_size, " x ", microbatches(),
                  " micro-batches x ", dp_size_,
                  " data ranks); set train.batch_size so that the product is ",
                  meta["sequences_per_step"].get<int64_t>(),
                  ", or start a new run in another checkpoint.dir");
  // The position counts global batches; another dp size or batch size maps it through samples.
  LoaderPosition pos{meta["train_loader"].at("epoch").get<int64_t>(),
                     meta["train_loader"].at("step").get<int64_t>()};
  const int64_t saved_batch = meta.value("global_batch", config_.train.batch_size * dp_size_);
  const int64_t batch = config_.train.batch_size * dp_size_;
  VESCALE_CHECK(pos.step * saved_batch % batch == 0, "checkpoint ", folder, ": it stopped after ",
                pos.step * saved_batch, " samples of epoch ", pos.epoch,
                ", not a whole number of this run's global batches of ", batch,
                " (train.batch_size x dp); choose a batch size that divides it");
  pos.step = pos.step * saved_batch / batch;
  train_loader_->seek(pos);
  resumed_step_ = meta["step"].get<int64_t>();
  run_id_ = info.run_id;
  resumed_ = true;
  if (rank_ == 0)
    log::info("resumed from " + folder + " after step " + std::to_string(resumed_step_));
}

}  // namespace vescale::train
