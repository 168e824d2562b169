// Copies of the latest checkpoint in host memory, held by the launchers (vescale-run's agent,
// which outlives its ranks' restarts): each rank's part in its own node's launcher and in the
// next node's (a ring by node), so a restart after a lost node still finds every part unless
// two neighbouring nodes were lost. The agent's store says which snapshot is whole and where
// each part is. Process-wide; available only under vescale-run's agent (VESCALE_KEEPERS).
// docs/fault_tolerance.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vescale::dist {

// Whether this rank's launcher keeps copies (it set VESCALE_KEEPERS). Not collective.
bool peer_memory_available();

// Not collective. This rank's part of snapshot `step` (a checkpoint rank file's name and
// bytes), sent to this node's launcher and the next node's. Throws naming a launcher that
// does not take it.
void keep_part(int64_t step, const std::string& file, const std::string& bytes);
// Rank 0, once every rank's keep_part of `step` returned (after a barrier): snapshot `step`
// with this index.json is the job's newest.
void publish_snapshot(int64_t step, const std::string& index_json);
// Not collective. Drops this rank's parts of snapshots older than `step` from the launchers.
void drop_parts_before(int64_t step);

struct KeptSnapshot {
  int64_t step = 0;
  std::string index_json;
};
// The newest published snapshot, or nullopt. Not collective.
std::optional<KeptSnapshot> latest_snapshot();
// Whether some launcher still holds each of `files` of snapshot `step`. Not collective.
bool snapshot_reachable(int64_t step, const std::vector<std::string>& files);
// A part of snapshot `step` from the first launcher that holds it. Throws naming the launchers
// it asked. Not collective.
std::string fetch_part(int64_t step, const std::string& file);

}  // namespace vescale::dist
