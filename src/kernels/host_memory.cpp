#include "vescale/kernels/host_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#if VESCALE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace vescale::kernels {
namespace {

class HostAllocator;
HostAllocator* host = nullptr;  // installed once, never freed

// Replaces c10's CPU allocator (same c10::alloc_cpu underneath). Each block has a 64-byte
// header with its size, so the live-byte count drops when the tensor's storage is freed, and
// the DataPtr's context is its data (libtorch's raw_allocate requires that). With caching on, a
// freed block of kMinCached bytes or more is kept under its size and handed to the next request
// of that size, most recently freed first: a training step allocates the same sizes in the same
// order each step, and the block freed last is the one still in cache and in the TLB.
class HostAllocator final : public c10::Allocator {
 public:
  static constexpr size_t kMinCached = 256 << 10;
  static constexpr size_t kHeader = 64;  // keeps the data at c10's 64-byte alignment

  c10::DataPtr allocate(size_t n) override {
    char* data = caching_.load(std::memory_order_relaxed) && n >= kMinCached ? take(n) : nullptr;
    if (data == nullptr && n > 0) {
      auto* base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
      std::memcpy(base, &n, sizeof n);
      data = base + kHeader;
    }
    const int64_t now = current_.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
    for (std::atomic<int64_t>* p : {&peak_, &max_held_}) {
      int64_t seen = p->load();
      while (now > seen && !p->compare_exchange_weak(seen, now)) {
      }
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  void set_caching(bool on) {
    caching_.store(on);
    if (!on) release_cached();
  }
  MemoryStats stats() const { return {current_.load(), peak_.load()}; }
  void reset_peak() { peak_.store(current_.load()); }
  HostCacheStats cache_stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {cached_bytes_, hits_, misses_};
  }
  void release_cached() {
    std::unordered_map<size_t, std::vector<char*>> idle;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      idle.swap(idle_);
      cached_bytes_ = 0;
    }
    for (auto& [size, blocks] : idle)
      for (char* data : blocks) c10::free_cpu(data - kHeader);
  }

 private:
  char* take(size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = idle_.find(n);
    if (it == idle_.end() || it->second.empty()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    char* data = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= static_cast<int64_t>(n);
    return data;
  }

  static void release(void* p) {
    if (p == nullptr) return;
    auto* data = static_cast<char*>(p);
    size_t n;
    std::memcpy(&n, data - kHeader, sizeof n);
    HostAllocator& self = *host;
    self.current_.fetch_sub(static_cast<int64_t>(n));
    if (n >= kMinCached && self.caching_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(self.mutex_);
      // Bounded by the most bytes ever held, so the cache at most doubles the peak footprint.
      if (self.cached_bytes_ + static_cast<int64_t>(n) <= self.max_held_.load()) {
        self.idle_[n].push_back(data);
        self.cached_bytes_ += static_cast<int64_t>(n);
        return;
      }
    }
    c10::free_cpu(data - kHeader);
  }

  std::atomic<int64_t> current_{0}, peak_{0}, max_held_{0};  // max_held_: peak_ never reset
  std::atomic<bool> caching_{false};
  std::mutex mutex_;  // guards the idle blocks and the cache counters
  std::unordered_map<size_t, std::vector<char*>> idle_;
  int64_t cached_bytes_ = 0, hits_ = 0, misses_ = 0;
};

HostAllocator& install() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Never freed: storages allocated through it may outlive any owner.
    host = new HostAllocator();
    c10::SetCPUAllocator(host, /*priority=*/100);
  });
  return *host;
}

}  // namespace

void track_memory() { install(); }

MemoryStats memory_stats(bool cuda) {
#if VESCALE_WITH_CUDA
  if (cuda) {
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
    const auto& all =
        s.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    return {all.current, all.peak};
  }
#endif
  return host && !cuda ? host->stats() : MemoryStats{};
}

void reset_peak_memory(bool cuda) {
#if VESCALE_WITH_CUDA
  if (cuda) return c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
#endif
  if (host && !cuda) host->reset_peak();
}

void cache_host_memory(bool on) {
  if (on) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's cap
    mallopt(M_TRIM_THRESHOLD, -1);
#endif
    install().set_caching(true);
  } else if (host != nullptr) {
    host->set_caching(false);
  }
}

HostCacheStats host_cache_stats() { return host ? host->cache_stats() : HostCacheStats{}; }

void release_cached_host_memory() {
  if (host) host->release_cached();
}

}  // namespace vescale::kernels
