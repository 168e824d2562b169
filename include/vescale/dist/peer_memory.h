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

// Copies alternate between two slots, so a new one never overwrites the newest published one
// and a keeper holds at most two per rank file whatever the restarts.
struct KeptSnapshot {
  int slot = 0;
  int64_t step = 0;
  std::string index_json;
};
// The newest published copy, or nullopt. Not collective.
std::optional<KeptSnapshot> latest_snapshot();
// The slot the next copy goes to (not the newest's). The same on every rank between two
// publications. Not collective.
int next_slot();

// Not collective (a background thread may call it). This rank's part of the copy in `slot` (a
// checkpoint rank file's name and bytes), sent to this node's launcher and the next node's.
// Throws naming a launcher that does not take it.
void keep_part(int slot, const std::string& file, const std::string& bytes);
// Rank 0, once every rank's keep_part returned: the copy in `slot`, after `step` steps, with
// this index.json, is the job's newest.
void publish_snapshot(int slot, int64_t step, const std::string& index_json);

// Whether some launcher still holds each of `files` of `snap`. Not collective.
bool snapshot_reachable(const KeptSnapshot& snap, const std::vector<std::string>& files);
// A part of `snap` from the first launcher that holds it. Throws naming the launchers it asked.
// Not collective.
std::string fetch_part(const KeptSnapshot& snap, const std::string& file);

}  // namespace vescale::dist
