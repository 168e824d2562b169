// Sharded checkpoints that reshard (docs/checkpoint.md). A checkpoint is a folder:
//   index.json              every tensor's global shape and dtype, and the global offsets, shape,
//                           file and key of each saved chunk; per file its size and CRC-32;
//                           the caller's metadata (JSON)
//   rank-00003.safetensors  the chunks world rank 3 owns (and the pieces it was given)
// Each distinct chunk is written once: by the rank at coordinate 0 along every mesh dim where
// the tensor is Replicate (plain tensors: by the lowest rank holding one). Ranks may hold
// different tensors (pipeline stages: each its own layers), on meshes over part of the world; a
// tensor held on several such meshes (a weight tied across stages) is written from the mesh of
// its lowest holder. Loading fills tensors of any placements on any mesh (or plain ones) from
// the chunks that overlap each rank's shard, so a checkpoint loads at any pipeline size.
//
// Saving is collective and crash-safe: the files go to "<folder>.tmp", and only when every rank
// has written its file does rank 0 write index.json, rename the folder into place and point
// "<root>/latest" at it. A crash before that leaves the previous checkpoint as it was.
// The root must be one file system that every rank sees (a local disk on one machine, or a
// shared one).
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vescale/dtensor/tensor_box.h"

namespace vescale::checkpoint {

class SafetensorsFile;

// Names to tensors: plain tensors (the same on every rank that holds one) or DTensors without
// Partial placements. A name means the same global tensor on every rank that passes it.
using StateDict = std::map<std::string, at::Tensor>;

// Boxes of global tensors held as plain tensors (ZeRO's flat slices): dtensor/tensor_box.h.
using Piece = dtensor::TensorBox;
using Box = dtensor::FlatBox;
using dtensor::flat_range_boxes;

// One tensor in an index.
struct IndexEntry {
  std::vector<int64_t> shape;  // global
  at::ScalarType dtype;
};

// What index.json holds, minus the chunk list.
struct CheckpointInfo {
  std::string folder;
  std::map<std::string, IndexEntry> tensors;
  std::string metadata;  // the JSON text save() was given
  std::string run_id;    // the run that wrote it (commit's run_id), "" if none was given
};

// Writes a checkpoint in the background: begin() copies this rank's chunks to host memory and
// hands them to a writer thread, so training continues; commit() (collective) waits for the
// writers, checks that every rank succeeded (else every rank throws, naming the ranks) and
// makes the checkpoint visible. One checkpoint in flight at a time.
class AsyncSave {
 public:
  AsyncSave();
  ~AsyncSave();  // waits for a writer still running, but commits nothing
  AsyncSave(const AsyncSave&) = delete;
  AsyncSave& operator=(const AsyncSave&) = delete;

  // Collective. `root`/`name` is the checkpoint's folder (e.g. "ckpt", "step-00000100").
  void begin(const std::string& root, const std::string& name, const StateDict& state,
             const std::string& metadata_json = "{}", const std::vector<Piece>& pieces = {});
  // Collective. Returns the folder now visible; no-op (empty string) when nothing is pending.
  // Records `run_id` in the index and keeps the newest `keep` checkpoints of that run under
  // root (0: all); other runs' checkpoints are never pruned. Removes stale saves (below).
  std::string commit(int64_t keep = 0, const std::string& run_id = "");
  // Blocks until this rank's file is written (a synchronous save that commits later).
  void wait();
  // Drops the pending save without making it visible (not collective): waits for this rank's
  // writer; rank 0 removes the unfinished folder.
  void abort();
  bool pending() const;

 private:
  struct Job;
  std::unique_ptr<Job> job_;
};

// begin() + commit().
std::string save(const std::string& root, const std::string& name, const StateDict& state,
                 const std::string& metadata_json = "{}", int64_t keep = 0,
                 const std::vector<Piece>& pieces = {});

// The folder root/latest points at, or nullopt when root has no committed checkpoint.
std::optional<std::string> latest(const std::string& root);

// Whether root holds a committed checkpoint (or a `latest` pointer).
bool has_checkpoints(const std::string& root);

// Removes the unfinished saves under root ("*.tmp", and "*.old" left by a crash while replacing
// a checkpoint) that are older than its newest committed checkpoint; returns what it removed.
// Not collective: call it on one rank.
std::vector<std::string> remove_stale_saves(const std::string& root);

// Reads and checks a checkpoint folder's index.json.
CheckpointInfo read_info(const std::string& folder);

// Where a checkpoint's files are read from: its folder, or copies held in memory (a
// MemoryCheckpoint: the launchers' copies of the latest one, docs/fault_tolerance.md).
class CheckpointSource {
 public:
  virtual ~CheckpointSource() = default;
  // The folder, or where memory holds it: for messages (and CheckpointInfo::folder).
  virtual const std::string& label() const = 0;
  virtual std::string index_text() const = 0;  // its index.json
  // One of its rank files, opened (its header read and checked). Throws naming it.
  virtual std::unique_ptr<SafetensorsFile> open(const std::string& file) const = 0;
  // The file's path on disk; "" when it has none.
  virtual std::string path(const std::string&) const { return ""; }
};

// A checkpoint's folder on disk.
class FolderSource : public CheckpointSource {
 public:
  explicit FolderSource(std::string folder) : folder_(std::move(folder)) {}
  const std::string& label() const override { return folder_; }
  std::string index_text() const override;
  std::unique_ptr<SafetensorsFile> open(const std::string& file) const override;
  std::string path(const std::string& file) const override;

 private:
  std::string folder_;
};

// A checkpoint in memory: its index.json, and a function that returns a rank file's bytes
// (throwing when it cannot).
class MemoryCheckpoint : public CheckpointSource {
 public:
  using Fetch = std::function<std::string(const std::string& file)>;
  MemoryCheckpoint(std::string label, std::string index_json, Fetch fetch);
  const std::string& label() const override { return label_; }
  std::string index_text() const override { return index_; }
  std::unique_ptr<SafetensorsFile> open(const std::string& file) const override;

 private:
  std::string label_, index_;
  Fetch fetch_;
};

// What save() would write, made in memory in the background: begin() copies this rank's chunks
// to host memory (collective) and a thread serializes its file and hands the bytes to `keep`
// (for the launchers' copies, dist/peer_memory.h) while training goes on; finish() (collective)
// waits, checks that every rank's `keep` succeeded (else every rank throws, naming the ranks) and
// returns the index.json naming every rank's file (on rank 0; "" elsewhere).
class AsyncSnapshot {
 public:
  using Keep = std::function<void(const std::string& file, const std::string& bytes)>;
  AsyncSnapshot();
  ~AsyncSnapshot();  // waits for a thread still running
  AsyncSnapshot(const AsyncSnapshot&) = delete;
  AsyncSnapshot& operator=(const AsyncSnapshot&) = delete;

  void begin(const StateDict& state, const std::string& metadata_json,
             const std::vector<Piece>& pieces, Keep keep);
  std::string finish(const std::string& run_id = "");
  bool pending() const;

 private:
  struct Job;
  std::unique_ptr<Job> job_;
};

CheckpointInfo read_info(const CheckpointSource& source);
void load(const CheckpointSource& source, const StateDict& state,
          const std::vector<Piece>& pieces = {});

// Fills every tensor of `state` in place (its local shard for a DTensor) from the checkpoint
// in `folder`, whatever mesh and placements it was saved with. Throws naming the tensor when
// the checkpoint lacks it or its global shape or dtype differ, and the file when a CRC-32 does
// not match. Not collective (every rank reads what it needs).
void load(const std::string& folder, const StateDict& state, const std::vector<Piece>& pieces = {});

}  // namespace vescale::checkpoint
