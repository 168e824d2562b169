// Bytes held by tensors on this rank, for the training log and the ZeRO memory tests. CPU
// memory is counted by a wrapper around c10's CPU allocator (installed by track_memory(); only
// allocations made after that count); CUDA memory comes from the caching allocator's stats.
#pragma once
#include <cstdint>

namespace vescale::train {

struct MemoryStats {
  int64_t current = 0;  // bytes held now
  int64_t peak = 0;     // the most held at once since the last reset_peak_memory()
};

void track_memory();  // idempotent
// cuda: the current CUDA device's (zeros in a build without CUDA); else the CPU's.
MemoryStats memory_stats(bool cuda = false);
void reset_peak_memory(bool cuda = false);

}  // namespace vescale::train
