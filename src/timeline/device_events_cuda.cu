#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "timeline/device_events.h"
#include "vescale/common/check.h"
#include "vescale/timeline/recorder.h"

namespace vescale::timeline::detail {

namespace {
constexpr int32_t kEvents = 1 << 14;  // per window; spans past it keep their host times
std::mutex g_mu;
std::vector<cudaEvent_t> g_pool;
cudaEvent_t g_anchor;
int64_t g_anchor_ns = 0;
std::atomic<int32_t> g_next{0};

void check(cudaError_t e, const char* what) {
  VESCALE_CHECK(e == cudaSuccess, "timeline: ", what, " failed: ", cudaGetErrorString(e));
}
}  // namespace

bool device_timing_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void device_window_begin() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_pool.empty()) {
    g_pool.resize(kEvents);
    for (auto& e : g_pool) check(cudaEventCreate(&e), "cudaEventCreate");
    check(cudaEventCreate(&g_anchor), "cudaEventCreate");
  }
  g_next = 0;
  check(cudaEventRecord(g_anchor, at::cuda::getCurrentCUDAStream()), "cudaEventRecord");
  check(cudaEventSynchronize(g_anchor), "cudaEventSynchronize");
  g_anchor_ns = now_ns();
}

int32_t device_event() {
  const int32_t i = g_next.fetch_add(1, std::memory_order_relaxed);
  if (i >= kEvents || g_pool.empty()) return -1;
  check(cudaEventRecord(g_pool[i], at::cuda::getCurrentCUDAStream()), "cudaEventRecord");
  return i;
}

std::vector<int64_t> device_event_times() {
  std::lock_guard<std::mutex> lock(g_mu);
  const int32_t n = std::min(g_next.load(), kEvents);
  std::vector<int64_t> out(std::max(n, 0));
  for (int32_t i = 0; i < n; ++i) {
    check(cudaEventSynchronize(g_pool[i]), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, g_anchor, g_pool[i]), "cudaEventElapsedTime");
    out[i] = g_anchor_ns + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  }
  g_next = 0;
  return out;
}

}  // namespace vescale::timeline::detail
