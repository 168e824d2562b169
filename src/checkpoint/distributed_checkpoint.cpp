#include "vescale/checkpoint/distributed_checkpoint.h"

#include "checkpoint/io.h"
#include "vescale/checkpoint/safetensors.h"
#include "vescale/common/check.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/timeline/recorder.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

namespace vescale::checkpoint {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kFormat = "vescale-checkpoint";
constexpr int kVersion = 1;

// A file's size and CRC-32 by reading it whole: only for the error path of load, where a file
// failed to parse (the normal paths take the digest from the bytes they write or read).
FileDigest file_digest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  VESCALE_CHECK(in, "checkpoint: cannot read ", path);
  std::vector<char> buf(1 << 20);
  FileDigest d;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<size_t>(in.gcount());
    d.crc32 = crc32_update(d.crc32, buf.data(), n);
    d.bytes += n;
  }
  return d;
}

std::string rank_file(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%05d.safetensors", rank);
  return buf;
}

// One saved piece of a tensor: where it sits in the global tensor, and who writes it.
struct Chunk {
  std::vector<int64_t> offsets, shape;
  int owner = 0;
};

// The chunks a tensor is saved as: one per distinct shard, owned by the (world) rank at
// coordinate 0 along every mesh dim where the tensor is Replicate. Empty shards (torch.chunk's
// last ranks) are skipped. A tensor that several ranks hold whole (a plain tensor), or that
// lives on several meshes (a weight tied across pipeline stages, one copy per stage's mesh), is
// saved by `first`, the lowest world rank holding it, or by first's mesh: other copies write
// nothing (an empty list).
std::vector<Chunk> chunks_of(const std::string& name, const at::Tensor& t, int first) {
  if (!dtensor::is_dtensor(t)) {
    return {Chunk{std::vector<int64_t>(t.dim(), 0), t.sizes().vec(), first}};
  }
  const auto& spec = dtensor::spec_of(t);
  VESCALE_CHECK(!spec.has_partial(), "checkpoint: tensor '", name, "' is ", spec.to_string(),
                ": a Partial tensor holds no values yet; redistribute it to Replicate or Shard "
                "before saving");
  const auto& mesh = spec.mesh.shape();
  bool holds_first = false;
  for (int64_t r = 0; r < mesh.numel(); ++r) holds_first |= spec.mesh.world_rank(r) == first;
  if (!holds_first) return {};
  std::vector<Chunk> out;
  for (int64_t r = 0; r < mesh.numel(); ++r) {
    const auto coord = mesh.coordinate(r);
    bool owner = true;
    for (int64_t d = 0; d < mesh.ndim(); ++d) {
      if (spec.placements[d].is_replicate() && coord[d] != 0) owner = false;
    }
    if (!owner) continue;
    Chunk c{spec.local_offset_at(coord), spec.local_shape_at(coord), spec.mesh.world_rank(r)};
    if (std::find(c.shape.begin(), c.shape.end(), 0) != c.shape.end()) continue;
    out.push_back(std::move(c));
  }
  return out;
}

at::Tensor local_of(const at::Tensor& t) {
  return dtensor::is_dtensor(t) ? dtensor::to_local(t) : t;
}

// Where this rank's part of tensor t (local_of(t)) starts in the global tensor.
std::vector<int64_t> local_offsets(const at::Tensor& t) {
  return dtensor::is_dtensor(t) ? dtensor::spec_of(t).local_offset()
                                : std::vector<int64_t>(t.dim(), 0);
}

std::vector<int64_t> global_shape(const at::Tensor& t) {
  return dtensor::is_dtensor(t) ? dtensor::spec_of(t).shape : t.sizes().vec();
}

json read_index(const std::string& folder);

using dist::all_gather_int64;
using dist::all_gather_text;
using dist::barrier;

}  // namespace

struct Planned {
  json index;
  std::map<std::string, at::Tensor> staged;  // this rank's chunks, host copies
};

// The state of one save between begin() and commit().
struct AsyncSave::Job {
  fs::path root, final_dir, tmp_dir;
  json index;
  std::map<std::string, at::Tensor> staged;  // this rank's chunks, host copies
  std::thread writer;
  std::string error;  // set by the writer on failure
  uint32_t crc = 0;
  uint64_t bytes = 0;
  std::map<std::string, uint32_t> chunk_crc32;  // this rank's chunks, by key
};

// Which rank writes which chunk of every tensor and piece, and this rank's chunks copied to
// the host: the index (without checksums) and what this rank writes. Collective.
Planned plan_save(const StateDict& state, const std::string& metadata_json,
                  const std::vector<Piece>& pieces) {
  const int rank = dist::rank_or_zero();
  Planned job;

  json meta;
  try {
    meta = json::parse(metadata_json);
  } catch (const json::exception& e) {
    VESCALE_FAIL("checkpoint: metadata is not valid JSON: ", e.what());
  }
  // Ranks may hold different tensors (pipeline stages hold their own layers): every rank's
  // names first, so that each tensor has one writer, then every rank's entries, merged.
  std::string names;
  for (const auto& [key, t] : state) names += key + "\n";
  std::map<std::string, int> first_holder;
  const auto every_names = all_gather_text(names);
  for (size_t r = every_names.size(); r-- > 0;) {
    std::istringstream in(every_names[r]);
    for (std::string key; std::getline(in, key);) first_holder[key] = static_cast<int>(r);
  }
  json mine = json::object();
  for (const auto& [key, t] : state) {
    VESCALE_CHECK(t.defined(), "checkpoint: tensor '", key, "' is undefined");
    const auto chunks = chunks_of(key, t, first_holder.at(key));
    json list = json::array();
    for (const auto& c : chunks) {
      list.push_back({{"offsets", c.offsets}, {"shape", c.shape}, {"file", rank_file(c.owner)}});
      if (c.owner == rank)
        job.staged[key] = local_of(t).detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
    }
    mine[key] = {
        {"shape", global_shape(t)},
        {"dtype", safetensors_dtype_name(t.scalar_type(), "checkpoint: tensor '" + key + "'")},
        {"chunks", std::move(list)}};
  }
  // Identical on every rank when all hold the same tensors; otherwise the union, each chunk once.
  const bool same_everywhere = std::all_of(every_names.begin(), every_names.end(),
                                           [&](const std::string& n) { return n == names; });
  json tensors = same_everywhere ? mine : json::object();
  if (!same_everywhere) {
    const auto every_entry = all_gather_text(mine.dump());
    for (size_t r = 0; r < every_entry.size(); ++r) {
      const json entries = json::parse(every_entry[r]);
      for (auto& [key, e] : entries.items()) {
        if (!tensors.contains(key)) {
          tensors[key] = e;
          continue;
        }
        VESCALE_CHECK(tensors[key]["shape"] == e["shape"] && tensors[key]["dtype"] == e["dtype"],
                      "checkpoint: rank ", r, " holds '", key, "' with another global shape or ",
                      "dtype than a lower rank");
        for (auto& c : e["chunks"])
          if (std::find(tensors[key]["chunks"].begin(), tensors[key]["chunks"].end(), c) ==
              tensors[key]["chunks"].end())
            tensors[key]["chunks"].push_back(c);
      }
    }
  }
  // Pieces: only their rank knows them, so rank 0 learns every rank's from one gather.
  json my_pieces = json::array();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto& p = pieces[i];
    const auto shape = p.local.sizes().vec();
    VESCALE_CHECK(p.local.defined() && shape.size() == p.global_shape.size() &&
                      shape.size() == p.offsets.size(),
                  "checkpoint: piece of '", p.name,
                  "': local, global_shape and offsets must have the same rank");
    for (size_t d = 0; d < shape.size(); ++d) {
      VESCALE_CHECK(p.offsets[d] >= 0 && p.offsets[d] + shape[d] <= p.global_shape[d],
                    "checkpoint: piece of '", p.name, "' at ", at::IntArrayRef(p.offsets),
                    " with shape ", at::IntArrayRef(shape), " lies outside the global shape ",
                    at::IntArrayRef(p.global_shape));
    }
    VESCALE_CHECK(!state.count(p.name), "checkpoint: '", p.name,
                  "' is both a state tensor and a piece");
    const std::string key = p.name + "#" + std::to_string(i);
    job.staged[key] = p.local.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
    my_pieces.push_back({{"name", p.name},
                         {"key", key},
                         {"offsets", p.offsets},
                         {"shape", shape},
                         {"global_shape", p.global_shape},
                         {"dtype", safetensors_dtype_name(p.local.scalar_type(),
                                                          "checkpoint: piece '" + p.name + "'")}});
  }
  const auto every_rank = all_gather_text(my_pieces.dump());
  for (size_t r = 0; r < every_rank.size(); ++r) {
    for (const auto& e : json::parse(every_rank[r])) {
      const std::string n = e.at("name").get<std::string>();
      if (!tensors.contains(n)) {
        tensors[n] = {
            {"shape", e.at("global_shape")}, {"dtype", e.at("dtype")}, {"chunks", json::array()}};
      }
      VESCALE_CHECK(
          tensors[n]["shape"] == e.at("global_shape") && tensors[n]["dtype"] == e.at("dtype"),
          "checkpoint: rank ", r, "'s piece of '", n,
          "' disagrees with other ranks on its global shape or dtype");
      tensors[n]["chunks"].push_back({{"offsets", e.at("offsets")},
                                      {"shape", e.at("shape")},
                                      {"file", rank_file(static_cast<int>(r))},
                                      {"key", e.at("key")}});
    }
  }
  job.index = {{"format", kFormat},
               {"version", kVersion},
               {"written_by", {{"vescale", VESCALE_VERSION}, {"git", VESCALE_GIT_REVISION}}},
               {"world_size", dist::size_or_one()},
               {"metadata", std::move(meta)},
               {"tensors", std::move(tensors)}};

  return job;
}

// The index's checksums and files table, on rank 0, from every rank's [ok, crc, bytes] and
// chunk CRCs (gathered to rank 0).
void complete_index(json& index, const std::vector<int64_t>& status,
                    const std::vector<std::string>& crcs, const std::string& run_id) {
  std::map<std::string, json> crc_of_file;
  for (size_t r = 0; r < crcs.size(); ++r)
    crc_of_file[rank_file(static_cast<int>(r))] = json::parse(crcs[r]);
  for (auto& [name, e] : index["tensors"].items()) {
    for (auto& c : e["chunks"]) {
      const json& in_file = crc_of_file.at(c.at("file").get<std::string>());
      const std::string key = c.value("key", name);
      if (in_file.contains(key)) c["crc32"] = in_file[key];
    }
  }
  json files = json::object();  // every rank wrote a file, if only an empty one
  for (size_t r = 0; r < crcs.size(); ++r)
    files[rank_file(static_cast<int>(r))] = {{"bytes", status[3 * r + 2]},
                                             {"crc32", status[3 * r + 1]}};
  index["files"] = std::move(files);
  if (!run_id.empty()) index["run_id"] = run_id;
}

AsyncSave::AsyncSave() = default;

AsyncSave::~AsyncSave() {
  if (job_ && job_->writer.joinable()) job_->writer.join();
}

bool AsyncSave::pending() const { return job_ != nullptr; }

void AsyncSave::begin(const std::string& root, const std::string& name, const StateDict& state,
                      const std::string& metadata_json, const std::vector<Piece>& pieces) {
  VESCALE_CHECK(!job_, "checkpoint: a save is still pending; commit() it before the next begin()");
  VESCALE_CHECK(!root.empty() && !name.empty(), "checkpoint: empty root or name");
  auto job = std::make_unique<Job>();
  job->root = root;
  job->final_dir = fs::path(root) / name;
  job->tmp_dir = fs::path(root) / (name + ".tmp");
  const int rank = dist::rank_or_zero();
  Planned planned = plan_save(state, metadata_json, pieces);
  job->index = std::move(planned.index);
  job->staged = std::move(planned.staged);

  // Rank 0 clears a stale .tmp folder (an earlier crash) before anyone writes into it.
  if (rank == 0) {
    std::error_code ec;
    fs::remove_all(job->tmp_dir, ec);
    fs::create_directories(job->tmp_dir, ec);
    VESCALE_CHECK(!ec, "checkpoint: cannot create ", job->tmp_dir.string(), ": ", ec.message(),
                  "; check checkpoint.dir");
  }
  barrier();

  Job* j = job.get();
  j->writer = std::thread([j, rank, traced = timeline::enabled()] {
    try {
      const auto path = (j->tmp_dir / rank_file(rank)).string();
      const int64_t begin = traced ? timeline::now_ns() : 0;
      const FileDigest d = save_safetensors(path, j->staged);
      if (traced) {  // on the IO lane: the write overlaps the steps that follow
        static const uint32_t kName = timeline::intern("write checkpoint");
        timeline::Span s;
        s.begin_ns = begin;
        s.end_ns = timeline::now_ns();
        s.bytes = static_cast<int64_t>(d.bytes);
        s.name = kName;
        s.kind = timeline::Kind::Checkpoint;
        s.lane = timeline::Lane::IO;
        timeline::record(s);
      }
      j->staged.clear();
      j->crc = d.crc32;
      j->bytes = d.bytes;
      j->chunk_crc32 = d.tensor_crc32;
    } catch (const std::exception& e) {
      j->error = e.what();
    }
  });
  job_ = std::move(job);
}

void AsyncSave::wait() {
  if (job_ && job_->writer.joinable()) job_->writer.join();
}

void AsyncSave::abort() {
  if (!job_) return;
  auto job = std::move(job_);
  if (job->writer.joinable()) job->writer.join();
  // Other ranks may still be writing theirs: what is left is removed as stale at a later start.
  if (dist::rank_or_zero() == 0) {
    std::error_code ec;
    fs::remove_all(job->tmp_dir, ec);
  }
}

std::string AsyncSave::commit(int64_t keep, const std::string& run_id) {
  if (!job_) return "";
  auto job = std::move(job_);
  if (job->writer.joinable()) job->writer.join();
  // Every rank's [ok, crc, bytes].
  const auto status =
      all_gather_int64({job->error.empty() ? 1 : 0, job->crc, static_cast<int64_t>(job->bytes)});
  const int w = dist::size_or_one();
  std::vector<int> failed;
  for (int r = 0; r < w; ++r) {
    if (status[3 * r] == 0) failed.push_back(r);
  }
  if (!failed.empty()) {
    std::ostringstream ranks;
    for (size_t i = 0; i < failed.size(); ++i) ranks << (i ? ", " : "") << failed[i];
    // Every writer has stopped (each rank joined its own before the gather): what they wrote
    // goes now, so a full disk does not stay full of half a checkpoint.
    if (dist::rank_or_zero() == 0) {
      std::error_code ec;
      fs::remove_all(job->tmp_dir, ec);
    }
    VESCALE_FAIL(
        "checkpoint: writing ", job->final_dir.string(), " failed on rank(s) ", ranks.str(),
        job->error.empty() ? "" : " (here: " + job->error + ")",
        "; the previous checkpoint is intact and the unfinished save was removed. Check free "
        "space and permissions of checkpoint.dir");
  }
  // Every rank's chunk CRCs, to rank 0 only: the index checks each chunk a lazy load reads.
  const auto crcs = dist::gather_text(json(job->chunk_crc32).dump(), 0);
  if (dist::rank_or_zero() == 0) {
    complete_index(job->index, status, crcs, run_id);
    write_text_durably((job->tmp_dir / "index.json").string(), job->index.dump(1), "checkpoint");
    std::error_code ec;
    // Replacing a checkpoint of the same name (a rerun): the old one goes only once the new is
    // whole.
    const fs::path old = job->final_dir.string() + ".old";
    if (fs::exists(job->final_dir)) {
      fs::remove_all(old, ec);
      fs::rename(job->final_dir, old, ec);
      VESCALE_CHECK(!ec, "checkpoint: cannot move the old ", job->final_dir.string(),
                    " aside: ", ec.message());
    }
    detail::fsync_path(job->tmp_dir.string());  // the folder's entries: every rank's file
    fs::rename(job->tmp_dir, job->final_dir, ec);
    VESCALE_CHECK(!ec, "checkpoint: cannot rename ", job->tmp_dir.string(), " to ",
                  job->final_dir.string(), ": ", ec.message());
    detail::fsync_path(job->root.string());
    write_text_durably((job->root / "latest").string(), job->final_dir.filename().string() + "\n",
                       "checkpoint");
    fs::remove_all(old, ec);
    if (keep > 0) {
      std::vector<fs::path>
          done;  // this run's: another run's checkpoints in the folder are not ours to drop
      for (const auto& e : fs::directory_iterator(job->root)) {
        if (e.is_directory() && fs::exists(e.path() / "index.json") &&
            e.path().extension() != ".tmp" &&
            read_index(e.path().string()).value("run_id", std::string()) == run_id) {
          done.push_back(e.path());
        }
      }
      std::sort(done.begin(), done.end());  // names sort by step (zero-padded)
      for (size_t i = 0; i + keep < done.size(); ++i) {
        if (done[i] != job->final_dir) fs::remove_all(done[i], ec);
      }
    }
    remove_stale_saves(job->root.string());
  }
  barrier();
  return job->final_dir.string();
}

std::string save(const std::string& root, const std::string& name, const StateDict& state,
                 const std::string& metadata_json, int64_t keep, const std::vector<Piece>& pieces) {
  AsyncSave s;
  s.begin(root, name, state, metadata_json, pieces);
  return s.commit(keep);
}

struct AsyncSnapshot::Job {
  json index;
  std::map<std::string, at::Tensor> staged;
  std::thread thread;
  std::string error;  // set by the thread on failure
  FileDigest digest;
};

AsyncSnapshot::AsyncSnapshot() = default;

AsyncSnapshot::~AsyncSnapshot() {
  if (job_ && job_->thread.joinable()) job_->thread.join();
}

bool AsyncSnapshot::pending() const { return job_ != nullptr; }

void AsyncSnapshot::begin(const StateDict& state, const std::string& metadata_json,
                          const std::vector<Piece>& pieces, Keep keep) {
  VESCALE_CHECK(!job_, "checkpoint: a snapshot is still pending; finish() it first");
  auto job = std::make_unique<Job>();
  Planned planned = plan_save(state, metadata_json, pieces);
  job->index = std::move(planned.index);
  job->staged = std::move(planned.staged);
  Job* j = job.get();
  j->thread = std::thread([j, keep = std::move(keep), file = rank_file(dist::rank_or_zero())] {
    try {
      std::string bytes;
      j->digest = safetensors_bytes(j->staged, bytes);
      j->staged.clear();
      keep(file, bytes);
    } catch (const std::exception& e) {
      j->error = e.what();
    }
  });
  job_ = std::move(job);
}

std::string AsyncSnapshot::finish(const std::string& run_id) {
  if (!job_) return "";
  auto job = std::move(job_);
  if (job->thread.joinable()) job->thread.join();
  const auto& d = job->digest;
  const auto status =
      all_gather_int64({job->error.empty() ? 1 : 0, d.crc32, static_cast<int64_t>(d.bytes)});
  std::string failed;
  for (size_t r = 0; r < status.size() / 3; ++r)
    if (status[3 * r] == 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  VESCALE_CHECK(failed.empty(), "checkpoint: keeping the copy in memory failed on rank(s) ", failed,
                job->error.empty() ? "" : " (here: " + job->error + ")");
  const auto crcs = dist::gather_text(json(d.tensor_crc32).dump(), 0);
  if (dist::rank_or_zero() != 0) return "";
  complete_index(job->index, status, crcs, run_id);
  return job->index.dump();
}

std::optional<std::string> latest(const std::string& root) {
  std::ifstream in(fs::path(root) / "latest");
  if (!in) return std::nullopt;
  std::string name;
  std::getline(in, name);
  VESCALE_CHECK(!name.empty(), "checkpoint: ", (fs::path(root) / "latest").string(),
                " is empty; delete it or point it at a checkpoint folder under ", root);
  const auto folder = fs::path(root) / name;
  VESCALE_CHECK(fs::exists(folder / "index.json"),
                "checkpoint: ", (fs::path(root) / "latest").string(), " points at ",
                folder.string(), ", which has no index.json");
  return folder.string();
}

bool has_checkpoints(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return false;
  if (fs::exists(fs::path(root) / "latest", ec)) return true;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory() && fs::exists(e.path() / "index.json")) return true;
  return false;
}

std::vector<std::string> remove_stale_saves(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  fs::file_time_type newest = fs::file_time_type::min();
  bool any = false;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory() || e.path().extension() == ".tmp" || !fs::exists(e.path() / "index.json"))
      continue;
    newest = std::max(newest, fs::last_write_time(e.path() / "index.json", ec));
    any = true;
  }
  if (!any) return removed;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const auto ext = e.path().extension();
    if (!e.is_directory() || (ext != ".tmp" && ext != ".old")) continue;
    if (fs::last_write_time(e.path(), ec) >= newest) continue;  // maybe a save still being written
    fs::remove_all(e.path(), ec);
    if (!ec) removed.push_back(e.path().string());
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

namespace {

json parse_index(const std::string& text, const std::string& path) {
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    VESCALE_FAIL("checkpoint: ", path, " is not valid JSON: ", e.what());
  }
  VESCALE_CHECK(index.is_object() && index.value("format", "") == kFormat, "checkpoint: ", path,
                " is not a vescale checkpoint index (format must be \"", kFormat, "\")");
  VESCALE_CHECK(index.value("version", 0) == kVersion, "checkpoint: ", path, " has version ",
                index.value("version", 0), "; this build reads version ", kVersion);
  VESCALE_CHECK(index.contains("tensors") && index["tensors"].is_object() &&
                    index.contains("files") && index["files"].is_object(),
                "checkpoint: ", path, " lacks its tensors or files table");
  return index;
}

std::string read_index_text(const std::string& folder) {
  const auto path = (fs::path(folder) / "index.json").string();
  std::ifstream in(path);
  VESCALE_CHECK(in, "checkpoint: ", folder,
                " has no index.json; not a checkpoint folder (or an unfinished save)");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  detail::count_bytes_read(text.size());
  return text;
}

json read_index(const std::string& folder) {
  return parse_index(read_index_text(folder), (fs::path(folder) / "index.json").string());
}

}  // namespace

std::string FolderSource::index_text() const { return read_index_text(folder_); }

std::string FolderSource::path(const std::string& file) const {
  return (fs::path(folder_) / file).string();
}

std::unique_ptr<SafetensorsFile> FolderSource::open(const std::string& file) const {
  return std::make_unique<SafetensorsFile>(path(file));
}

MemoryCheckpoint::MemoryCheckpoint(std::string label, std::string index_json, Fetch fetch)
    : label_(std::move(label)), index_(std::move(index_json)), fetch_(std::move(fetch)) {}

std::unique_ptr<SafetensorsFile> MemoryCheckpoint::open(const std::string& file) const {
  return std::make_unique<SafetensorsFile>(label_ + "/" + file,
                                           std::make_shared<const std::string>(fetch_(file)));
}

CheckpointInfo read_info(const std::string& folder) { return read_info(FolderSource(folder)); }

void load(const std::string& folder, const StateDict& state, const std::vector<Piece>& pieces) {
  load(FolderSource(folder), state, pieces);
}

CheckpointInfo read_info(const CheckpointSource& source) {
  const json index = parse_index(source.index_text(), source.label() + "/index.json");
  CheckpointInfo info;
  info.folder = source.label();
  for (const auto& [key, e] : index["tensors"].items()) {
    info.tensors[key] = IndexEntry{
        e.at("shape").get<std::vector<int64_t>>(),
        safetensors_dtype(e.at("dtype").get<std::string>(), "checkpoint: tensor '" + key + "'")};
  }
  info.metadata = index.value("metadata", json::object()).dump();
  info.run_id = index.value("run_id", std::string());
  return info;
}

void load(const CheckpointSource& source, const StateDict& state,
          const std::vector<Piece>& pieces) {
  const std::string& folder = source.label();
  const json index = parse_index(source.index_text(), folder + "/index.json");
  const auto& tensors = index["tensors"];
  const auto& files = index["files"];
  // Each chunk a box needs is read alone (pread) and checked against its CRC-32 in the index.
  // An index without chunk CRCs (written before they existed) reads and checks whole files.
  std::map<std::string, std::unique_ptr<SafetensorsFile>> opened;
  std::map<std::string, std::map<std::string, at::Tensor>> whole;  // file -> its chunks (old)
  std::map<std::pair<std::string, std::string>, at::Tensor> read_chunks;
  auto path_of = [&](const std::string& file) {
    VESCALE_CHECK(files.contains(file), "checkpoint: ", folder, "/index.json lists no file ", file);
    const std::string path = source.path(file);
    return path.empty() ? folder + "/" + file : path;
  };
  auto check_whole = [&](const std::string& file, const FileDigest& d) {
    const auto& f = files[file];
    VESCALE_CHECK(
        d.bytes == f.at("bytes").get<uint64_t>() && d.crc32 == f.at("crc32").get<uint32_t>(),
        "checkpoint: ", path_of(file), " is corrupt: ", d.bytes, " bytes with CRC-32 ", d.crc32,
        ", the index says ", f.at("bytes").get<uint64_t>(), " bytes with CRC-32 ",
        f.at("crc32").get<uint32_t>());
  };
  auto chunk_tensor = [&](const json& c, const std::string& key) -> const at::Tensor& {
    const std::string file = c.at("file").get<std::string>(), chunk_key = c.value("key", key);
    auto cached = read_chunks.find({file, chunk_key});
    if (cached != read_chunks.end()) return cached->second;
    const std::string path = path_of(file);
    at::Tensor t;
    if (c.contains("crc32")) {
      auto& f = opened[file];
      if (!f) {
        try {
          f = source.open(file);
        } catch (const std::exception&) {
          // Say "corrupt" if it is.
          if (!source.path(file).empty() && fs::exists(path)) check_whole(file, file_digest(path));
          throw;
        }
        const uint64_t want = files[file].at("bytes").get<uint64_t>();
        VESCALE_CHECK(f->file_size() == want, "checkpoint: ", path, " is corrupt: ", f->file_size(),
                      " bytes, the index says ", want);
      }
      VESCALE_CHECK(f->contains(chunk_key), "checkpoint: ", file, " in ", folder,
                    " lacks the chunk of '", key, "' its index lists");
      uint32_t crc = 0;
      t = f->tensor(chunk_key, &crc);
      VESCALE_CHECK(crc == c.at("crc32").get<uint32_t>(), "checkpoint: ", path,
                    " is corrupt: the chunk of '", key, "' at offsets ", c.at("offsets").dump(),
                    " has CRC-32 ", crc, ", the index says ", c.at("crc32").get<uint32_t>());
    } else {
      VESCALE_CHECK(!source.path(file).empty(), "checkpoint: ", folder,
                    " has no chunk checksums; only a folder of an older version has none");
      auto it = whole.find(file);
      if (it == whole.end()) {
        FileDigest d;
        std::map<std::string, at::Tensor> chunks;
        try {
          chunks = read_safetensors(path, &d).tensors;  // one pass: the digest comes with it
        } catch (const std::exception&) {
          if (fs::exists(path)) check_whole(file, file_digest(path));
          throw;
        }
        check_whole(file, d);
        it = whole.emplace(file, std::move(chunks)).first;
      }
      auto found = it->second.find(chunk_key);
      VESCALE_CHECK(found != it->second.end(), "checkpoint: ", file, " in ", folder,
                    " lacks the chunk of '", key, "' its index lists");
      t = found->second;
    }
    return read_chunks.emplace(std::make_pair(file, chunk_key), std::move(t)).first->second;
  };

  // Fills dst, the box of tensor `key` at `want_offsets`, from the chunks that overlap it.
  std::string last_key;
  auto fill = [&](const std::string& key, at::Tensor dst, const std::vector<int64_t>& want_offsets,
                  const std::vector<int64_t>& global) {
    // Chunks read for one tensor serve its other boxes (ZeRO's pieces) only: drop the last
    // tensor's, so a load holds at most one tensor's chunks besides its targets.
    if (key != last_key) read_chunks.clear(), last_key = key;
    VESCALE_CHECK(tensors.contains(key), "checkpoint: ", folder, " has no tensor '", key,
                  "' (it holds ", tensors.size(), " tensors; saved from another model or config?)");
    const auto& e = tensors[key];
    const auto shape = e.at("shape").get<std::vector<int64_t>>();
    VESCALE_CHECK(shape == global, "checkpoint: tensor '", key, "' has shape ",
                  at::IntArrayRef(shape), " in ", folder, " but ", at::IntArrayRef(global),
                  " here; the model config differs");
    const auto dtype =
        safetensors_dtype(e.at("dtype").get<std::string>(), "checkpoint: tensor '" + key + "'");
    VESCALE_CHECK(dtype == dst.scalar_type(), "checkpoint: tensor '", key, "' is ", dtype, " in ",
                  folder, " but ", dst.scalar_type(), " here");
    const auto want_shape = dst.sizes().vec();
    int64_t covered = 0;
    for (const auto& c : e.at("chunks")) {
      const auto off = c.at("offsets").get<std::vector<int64_t>>();
      const auto shp = c.at("shape").get<std::vector<int64_t>>();
      VESCALE_CHECK(off.size() == shape.size() && shp.size() == shape.size(),
                    "checkpoint: tensor '", key, "': a chunk's rank differs from the tensor's");
      // The overlap of the chunk and the wanted box, dim by dim: {src start, dst start, length}.
      bool empty = false;
      std::vector<std::array<int64_t, 3>> cut;
      for (size_t d = 0; d < shape.size(); ++d) {
        const int64_t lo = std::max(off[d], want_offsets[d]);
        const int64_t hi = std::min(off[d] + shp[d], want_offsets[d] + want_shape[d]);
        if (hi <= lo) empty = true;
        cut.push_back({lo - off[d], lo - want_offsets[d], hi - lo});
      }
      if (empty) continue;
      const at::Tensor& chunk = chunk_tensor(c, key);
      VESCALE_CHECK(chunk.sizes().vec() == shp, "checkpoint: the chunk of '", key, "' in ",
                    c.at("file").get<std::string>(), " in ", folder, " has shape ", chunk.sizes(),
                    ", its index says ", at::IntArrayRef(shp));
      at::Tensor src_view = chunk, dst_view = dst;
      int64_t n = 1;
      for (size_t d = 0; d < cut.size(); ++d) {
        src_view = src_view.narrow(static_cast<int64_t>(d), cut[d][0], cut[d][2]);
        dst_view = dst_view.narrow(static_cast<int64_t>(d), cut[d][1], cut[d][2]);
        n *= cut[d][2];
      }
      dst_view.copy_(src_view);
      covered += n;
    }
    VESCALE_CHECK(covered == dst.numel(), "checkpoint: tensor '", key, "' in ", folder,
                  ": the chunks cover ", covered, " of the ", dst.numel(),
                  " elements wanted here; the index is inconsistent");
  };

  c10::NoGradGuard no_grad;
  for (const auto& [key, t] : state) fill(key, local_of(t), local_offsets(t), global_shape(t));
  for (const auto& p : pieces) fill(p.name, p.local, p.offsets, p.global_shape);
}

}  // namespace vescale::checkpoint
