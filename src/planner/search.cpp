#include "vescale/planner/search.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "vescale/common/check.h"

namespace vescale::planner {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

SearchResult search(const ModelShape& model, const train::Config& config,
                    const DeviceProfile& device, const SearchOptions& o) {
  VESCALE_CHECK(o.gpus >= 1 && o.gpus_per_node >= 1, "vescale-plan: --gpus and --gpus-per-node "
                "must be at least 1");
  VESCALE_CHECK(o.global_batch >= 1, "vescale-plan: the global batch is not set; set "
                "train.global_batch_size in the config (or --global-batch-size)");
  SearchResult r;
  SimulationCache simulations;
  const TrainingStack& stack = training_stack(o.stack);
  const bool bf16_reduce = config.parallel.reduce_dtype == train::DType::Bf16;
  // What a caching allocator holds beyond the live tensors (fragmentation, workspaces): the
  // prediction is the live bytes, the fit allows for this much more.
  constexpr double kAllocatorSlack = 1.08;
  const double budget = o.memory_fraction * device.memory_bytes / kAllocatorSlack;
  const int64_t blocks = model.n_layers;
  auto prune = [&](const char* why) { ++r.pruned[why]; };
  for (int64_t tp : divisors(o.gpus)) {
    if (!power_of_two(tp) || tp > o.gpus_per_node) continue;  // tp stays within a node
    if (model.dim % tp != 0) {
      prune("tp does not divide the model's width");
      continue;
    }
    for (int64_t pp : divisors(o.gpus / tp)) {
      if (pp > blocks) continue;
      for (int64_t ep : divisors(o.gpus / tp / pp)) {
        if (ep > 1 && (!model.moe() || model.n_experts % ep != 0)) continue;
        const int64_t dp = o.gpus / tp / pp / ep;
        for (int64_t mb : {1, 2, 4, 8}) {
          if (o.global_batch % (mb * dp * ep) != 0) {
            prune("the global batch does not divide into micro-batches");
            continue;
          }
          const int64_t M = o.global_batch / (mb * dp * ep);
          std::vector<std::pair<plan::ScheduleKind, int64_t>> schedules = {
              {plan::ScheduleKind::OneFOneB, 1}};
          if (pp > 1) {
            schedules.push_back({plan::ScheduleKind::ZeroBubbleH1, 1});
            if (blocks >= 2 * pp) schedules.push_back({plan::ScheduleKind::Interleaved1F1B, 2});
          }
          for (auto [kind, chunks] : schedules) {
            if (pp > 1 && M < pp) {
              prune("fewer micro-batches than pipeline ranks");
              continue;
            }
            for (bool sp : {false, true}) {
              if (sp && (tp == 1 || !o.sequence_parallel)) continue;
              for (int64_t zero : {0, 1, 2, 3}) {
                if (zero > 0 && dp * ep == 1) continue;  // shards nothing
                if (zero == 3 && pp > 1) {
                  prune("ZeRO-3 with a pipeline (not supported)");
                  continue;
                }
                for (bool ckpt : {false, true}) {
                  // The reduction dtype is the config's: bf16 would change the math.
                  Layout l{pp, dp, ep, tp, sp, zero, ckpt, mb, kind, chunks, bf16_reduce};
                  StepPrediction p = predict(model, config, l, o.global_batch, device,
                                             o.gpus_per_node, &simulations, stack);
                  ++r.weighed;
                  if (p.peak_memory_bytes > budget) {
                    prune("does not fit the device's memory");
                    continue;
                  }
                  r.best.push_back({l, p});
                }
              }
            }
          }
        }
      }
    }
  }
  // Fastest first; layouts predicted equally fast (to the nanosecond: what differs below that is
  // summation order) in the order a person would try them: lower ZeRO stage, no checkpointing,
  // less memory.
  std::sort(r.best.begin(), r.best.end(), [](const Candidate& a, const Candidate& b) {
    auto key = [](const Candidate& c) {
      return std::make_tuple(std::llround(c.prediction.step_s * 1e9), c.layout.zero,
                             c.layout.checkpointing, c.prediction.peak_memory_bytes);
    };
    return key(a) < key(b);
  });
  if (r.best.size() > o.top) r.best.resize(o.top);
  return r;
}

}  // namespace vescale::planner
