// Small host values across the world: the control plane of checkpoints and of the trainer's
// agreements (every rank's status, a stop request). Each works before and without dist::init()
// as a world of one, so callers need no special case for a single process.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vescale::dist {

// This rank, and the world's size: 0 and 1 before and without dist::init(). Not collective.
int rank_or_zero();
int size_or_one();

// Every rank's `mine` (the same count on each), concatenated in rank order. Collective.
std::vector<int64_t> all_gather_int64(const std::vector<int64_t>& mine);
// Every rank's text, in rank order. Collective.
std::vector<std::string> all_gather_text(const std::string& mine);
// Every rank's text on `root` (in rank order; the others get an empty list): point-to-point,
// so only the root holds them all, e.g. the timeline's spans. Collective.
std::vector<std::string> gather_text(const std::string& mine, int root = 0);
// The largest of every rank's value. Collective.
int64_t all_max(int64_t mine);
// Collective: returns once every rank has called it.
void barrier();

}  // namespace vescale::dist
