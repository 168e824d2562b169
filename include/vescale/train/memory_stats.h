// Host and device memory: bytes held by tensors on this rank, for the training log and the ZeRO
// memory tests, and the host heap setting CPU training runs under (keep_freed_host_memory). CPU
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

// Each CPU step frees and reallocates the same activations. By default glibc maps blocks
// above its (adaptive) mmap threshold fresh and returns the heap's free top to the OS, so a
// step page-faults much of its memory in again (~5K faults per nanogpt_tiny step, several %
// of its time). This keeps blocks up to 32 MiB (glibc's cap) in the heap, untrimmed: the next
// step reuses the same pages, and the process keeps its peak footprint, as a caching allocator
// would. Process-wide; vescale-train calls it for CPU runs. A no-op without glibc.
void keep_freed_host_memory();

}  // namespace vescale::train
