// Host and device memory: bytes held by tensors on this rank, for the training log and the ZeRO
// memory tests, and the host memory cache CPU training runs with (cache_host_memory). CPU
// memory is counted by our replacement for c10's CPU allocator (installed by track_memory() or
// cache_host_memory(); only allocations made after that count); CUDA memory comes from the
// CUDA caching allocator's stats.
#pragma once
#include <cstdint>

namespace vescale::kernels {

struct MemoryStats {
  int64_t current = 0;  // bytes held now
  int64_t peak = 0;     // the most held at once since the last reset_peak_memory()
};

void track_memory();  // idempotent
// cuda: the current CUDA device's (zeros in a build without CUDA); else the CPU's.
MemoryStats memory_stats(bool cuda = false);
void reset_peak_memory(bool cuda = false);

// Each CPU step frees and reallocates the same activations. glibc hands a freed block back
// for some later request, often one that was freed long before (cold in cache and TLB: a GEMM
// or elementwise kernel writing it runs 5-15% slower, a memory-bound one up to 3x), maps
// blocks above its adaptive mmap threshold fresh and trims the heap's free top, so a step also
// page-faults much of its memory in again (~5K faults per nanogpt_tiny step). cache_host_memory()
// keeps blocks up to 32 MiB in glibc's heap, untrimmed, and turns on the CPU allocator's cache:
// each freed block of 256 KiB or more waits under its exact size for the next request of that
// size, most recently freed first. The process keeps its peak footprint, as PyTorch's CUDA
// caching allocator does on a GPU; the idle blocks never exceed the most bytes tensors ever held
// at once (beyond that a freed block goes back to the heap).
// Process-wide; vescale-train turns it on for CPU runs. cache_host_memory(false) stops caching
// and frees the cached blocks; release_cached_host_memory() frees them and keeps caching.
// memory_stats() counts bytes held by tensors, not the cache's idle blocks.
void cache_host_memory(bool on = true);
void release_cached_host_memory();

struct HostCacheStats {
  int64_t cached_bytes = 0;      // idle blocks waiting for reuse
  int64_t hits = 0, misses = 0;  // requests of 256 KiB or more served from the cache / not
};
HostCacheStats host_cache_stats();

}  // namespace vescale::kernels
