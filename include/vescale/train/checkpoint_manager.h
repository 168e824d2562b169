// The run's checkpoints: the checks on checkpoint.dir before anything is built, the resume
// before step 1 (weights, optimizer, both random generators, the data position, in one read),
// saves in the background, the commit once the next step has passed the divergence guard, the
// run id and `keep`. The format is docs/checkpoint.md's; the trainer only says when.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "vescale/checkpoint/distributed_checkpoint.h"
#include "vescale/checkpoint/root_lock.h"
#include "vescale/train/config.h"
#include "vescale/train/model_factory.h"

namespace vescale::optim {
class Optimizer;
}
namespace vescale::parallel {
class ShardedParameters;
}

namespace vescale::train {

class DataLoader;

// The run's state a checkpoint holds, lent by its owner for the manager's lifetime.
struct CheckpointParts {
  Model* model = nullptr;  // parameters, and the buffers named by Model::state_buffers
  optim::Optimizer* optimizer = nullptr;
  parallel::ShardedParameters* sharded = nullptr;  // ZeRO-3: gathered to save or load; or null
  DataLoader* train_loader = nullptr;
  std::string device = "cpu";  // whose libtorch generator is saved
  // The model holds some of the layers only (a pipeline stage): the optimizer state of the
  // others in a checkpoint belongs to other ranks.
  bool some_layers_only = false;
};

// The batch one step takes. The data position is counted in loader batches, so a resume maps
// it through samples when the number of data ranks or the batch size changed.
struct StepBatch {
  int64_t batch_size = 1;    // train.batch_size: sequences per data rank and micro-batch
  int64_t microbatches = 1;  // train.grad_accum, or the pipeline's micro-batches
  int64_t data_ranks = 1;
  int64_t seq_len = 1;
  int64_t loader_batch() const { return batch_size * data_ranks; }  // one loader step
  int64_t sequences() const { return loader_batch() * microbatches; }  // the global batch
};

class CheckpointManager {
 public:
  // Checks checkpoint.dir (not empty) on this rank before the run builds anything: writable
  // (a block written and synced), not already holding checkpoints unless checkpoint.resume or
  // checkpoint.overwrite; rank 0 takes the folder's lock and removes stale unfinished saves.
  // Not collective; throws naming the field and the fix.
  CheckpointManager(const Config& config, int rank);
  ~CheckpointManager();

  // Lends the run's state. With checkpoint.resume and a committed checkpoint, loads it (before
  // step 1; the run keeps its id); otherwise the run gets a new id. Collective; throws on every
  // rank when the checkpoint does not fit this run (model type, seq_len, global batch).
  void start(const CheckpointParts& parts, const StepBatch& batch);

  // Whether a checkpoint is written after `step` (1-based): every checkpoint.every steps, and
  // after the last step the run takes.
  bool due(int64_t step, bool last) const;
  // Commits a save in flight, then stages one after `steps_done` steps; without
  // checkpoint.async, waits until this rank's file is written. Commits nothing. Collective.
  void stage(int64_t steps_done);
  // Makes the staged save `latest` (pruning to checkpoint.keep); no-op without one. Collective.
  void commit();
  // Drops a staged save (not collective): a failed step must not make it visible.
  void abort();

  // checkpoint.in_memory_every under vescale-run's agent: copies of the state in the
  // launchers' memory (dist/peer_memory.h), newest first at a resume.
  bool due_in_memory(int64_t step) const;
  bool pending_in_memory() const { return snapshot_.pending(); }
  // Sends this rank's copy after `steps_done` steps to its launchers in the background
  // (publishing the previous one first). Collective.
  void stage_in_memory(int64_t steps_done);
  // Makes the copy in flight the one a restart loads; no-op without one. Collective.
  void commit_in_memory();
  bool pending() const;

  int64_t resumed_step() const { return resumed_step_; }
  bool resumed() const { return resumed_; }
  const std::string& run_id() const { return run_id_; }
  // The guard's sentence on which checkpoint to go back to when step `failed_step` failed.
  std::string last_good(int64_t failed_step) const;

 private:
  checkpoint::StateDict model_state() const;
  // What a save holds after `steps_done` steps: tensors, ZeRO's pieces, the metadata JSON.
  struct Saved {
    checkpoint::StateDict state;
    std::vector<checkpoint::Piece> pieces;
    std::string metadata;
  };
  Saved collect(int64_t steps_done) const;
  void resume_from(const checkpoint::CheckpointSource& source);
  // Resumes from the launchers' copy when it is newer than `folder` (dir's latest) and whole.
  bool resume_from_memory(const std::optional<std::string>& folder);
  // The checkpoint's optimizer entries this rank's optimizer holds (name -> global shape).
  std::map<std::string, std::vector<int64_t>> saved_optimizer_state(
      const checkpoint::CheckpointInfo& info) const;

  CheckpointConfig config_;
  std::string model_type_, config_json_;
  int rank_ = 0;
  CheckpointParts parts_;
  StepBatch batch_;
  std::unique_ptr<checkpoint::RootLock> lock_;  // rank 0
  checkpoint::AsyncSave saver_;
  int64_t resumed_step_ = 0;
  int64_t staged_step_ = 0;     // the steps the save in flight holds
  int64_t committed_step_ = 0;  // the newest committed or resumed checkpoint's
  bool in_memory_ = false;      // checkpoint.in_memory_every with launchers keeping copies
  checkpoint::AsyncSnapshot snapshot_;  // the copy for the launchers' memory in flight
  int64_t memory_step_ = 0;             // its step
  int memory_slot_ = 0;                 // and slot (dist/peer_memory.h)
  bool resumed_ = false;
  std::string run_id_;
};

}  // namespace vescale::train
