// The CPU allocator wrapper of kernels/host_memory.h: it counts bytes held by tensors, and with
// cache_host_memory() hands a freed block of 256 KiB or more to the next request of its exact
// size, most recently freed first. Process-wide, so each case turns the cache off again.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include "vescale/kernels/host_memory.h"

namespace kernels = vescale::kernels;

namespace {
const void* address(const at::Tensor& t) { return t.storage().data(); }
}  // namespace

TEST_CASE("host cache: a freed block goes to the next request of its size, last freed first",
          "[host_memory]") {
  kernels::cache_host_memory();
  kernels::release_cached_host_memory();
  const int64_t n = 1 << 18;  // 1 MiB of floats
  at::Tensor a = at::empty({n}), b = at::empty({n});
  const void *pa = address(a), *pb = address(b);
  const auto before = kernels::host_cache_stats();
  CHECK(before.cached_bytes == 0);
  const int64_t held = kernels::memory_stats().current;

  a.reset();
  b.reset();  // b is freed last
  CHECK(kernels::host_cache_stats().cached_bytes == 2 * n * 4);
  // The cache's idle blocks are not bytes held by tensors.
  CHECK(kernels::memory_stats().current == held - 2 * n * 4);

  at::Tensor c = at::empty({n}), d = at::empty({n}, at::kInt);  // same byte size, other dtype
  CHECK(address(c) == pb);
  CHECK(address(d) == pa);
  const auto after = kernels::host_cache_stats();
  CHECK(after.hits - before.hits == 2);
  CHECK(after.cached_bytes == 0);

  // Reused memory behaves as fresh memory: results match a computation on new tensors.
  at::Tensor x = at::randn({512, 512});
  at::Tensor want = at::mm(x, x).clone();
  c.reset();
  at::Tensor got = at::mm(x, x);  // 1 MiB: served from the block c just freed
  CHECK(address(got) == pb);
  CHECK(at::equal(got, want));

  // libtorch's raw_allocate (scratch buffers in some kernels) needs a DataPtr whose context is
  // its data; the raw block goes through the cache like any other.
  c10::Allocator* cpu = c10::GetCPUAllocator();
  got.reset();
  void* raw = cpu->raw_allocate(n * 4);
  CHECK(raw == pb);
  const int64_t idle = kernels::host_cache_stats().cached_bytes;
  cpu->raw_deallocate(raw);
  CHECK(kernels::host_cache_stats().cached_bytes == idle + n * 4);
  kernels::cache_host_memory(false);
}

TEST_CASE(
    "host cache: other sizes miss, small blocks are not kept, turning it off frees the idle blocks",
    "[host_memory]") {
  kernels::cache_host_memory();
  kernels::release_cached_host_memory();
  const int64_t n = 1 << 18;
  at::Tensor a = at::empty({n});
  const void* pa = address(a);
  a.reset();
  const auto before = kernels::host_cache_stats();
  at::Tensor bigger = at::empty({n + 1024});  // a different size: not the cached block
  CHECK(address(bigger) != pa);
  CHECK(kernels::host_cache_stats().misses == before.misses + 1);
  CHECK(kernels::host_cache_stats().cached_bytes == n * 4);

  at::Tensor small = at::empty({1000});  // 4 KB: under 256 KiB, glibc's business
  small.reset();
  CHECK(kernels::host_cache_stats().cached_bytes == n * 4);

  kernels::cache_host_memory(false);
  CHECK(kernels::host_cache_stats().cached_bytes == 0);
  bigger.reset();  // caching is off: straight back to the heap
  CHECK(kernels::host_cache_stats().cached_bytes == 0);
}
