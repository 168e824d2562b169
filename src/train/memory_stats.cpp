#include "vescale/train/memory_stats.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#if VESCALE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace vescale::train {
namespace {

// Wraps the CPU allocator: each DataPtr it hands out carries a context that remembers its
// size and the base allocation, so the count drops when the tensor's storage is freed.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    auto* ctx = new Held{base_->allocate(n), static_cast<int64_t>(n), this};
    const int64_t now = current_.fetch_add(ctx->bytes) + ctx->bytes;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    void* data = ctx->inner.get();
    const c10::Device device = ctx->inner.device();
    return {data, ctx, &release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  MemoryStats stats() const { return {current_.load(), peak_.load()}; }
  void reset_peak() { peak_.store(current_.load()); }

 private:
  struct Held {
    c10::DataPtr inner;
    int64_t bytes;
    CountingAllocator* owner;
  };
  static void release(void* p) {
    auto* ctx = static_cast<Held*>(p);
    ctx->owner->current_.fetch_sub(ctx->bytes);
    delete ctx;  // frees the base allocation with its own deleter
  }

  c10::Allocator* base_;
  std::atomic<int64_t> current_{0}, peak_{0};
};

CountingAllocator* counting = nullptr;

}  // namespace

void track_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Never freed: storages allocated through it may outlive any owner.
    counting = new CountingAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(counting, /*priority=*/100);
  });
}

MemoryStats memory_stats(bool cuda) {
#if VESCALE_WITH_CUDA
  if (cuda) {
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
    const auto& all = s.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    return {all.current, all.peak};
  }
#endif
  return counting && !cuda ? counting->stats() : MemoryStats{};
}

void reset_peak_memory(bool cuda) {
#if VESCALE_WITH_CUDA
  if (cuda) return c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
#endif
  if (counting && !cuda) counting->reset_peak();
}

void keep_freed_host_memory() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's cap
  mallopt(M_TRIM_THRESHOLD, -1);
#endif
}

}  // namespace vescale::train
