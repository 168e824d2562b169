// Does the model fit a rank? The dry run's estimate against the memory the rank has, checked
// before the model is built: a model that cannot fit is an error naming the fix, not an
// allocator failure after minutes of growth.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "train/trainer_internal.h"
#include "vescale/common/check.h"
#include "vescale/common/input_error.h"
#include "vescale/common/logging.h"
#include "vescale/dist/cuda_device.h"
#include "vescale/train/dry_run.h"

namespace vescale::train {

namespace {

// MemAvailable from /proc/meminfo, in bytes (0 when unreadable).
double host_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (f >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    f.ignore(1 << 10, '\n');
  }
  return 0;
}

// A container's limit (cgroup v2, then v1); 0 when none is set.
double cgroup_limit() {
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream f(path);
    std::string v;
    if (!(f >> v) || v == "max") continue;
    try {
      const double bytes = std::stod(v);
      if (bytes > 0 && bytes < 1e18) return bytes;  // v1 writes a huge number for "none"
    } catch (const std::exception&) {
    }
  }
  return 0;
}

}  // namespace

double rank_memory_bytes(const std::string& device, int local_ranks, std::string& where) {
  if (device.rfind("cuda", 0) == 0) {
    const double total = static_cast<double>(dist::cuda_memory_total());
    where = "its GPU (" + gib(total) + ")";
    return total;
  }
  double host = host_available();
  const double limit = cgroup_limit();
  if (limit > 0 && (host <= 0 || limit < host)) host = limit;
  const int n = local_ranks > 0 ? local_ranks : 1;
  where = n == 1 ? "the host's available memory (" + gib(host) + ")"
                 : "its share of the host's available memory (" + gib(host) + " / " +
                       std::to_string(n) + " local ranks)";
  return host / n;
}

void check_fits(const Config& config, const mesh::MeshShape& mesh, double available_bytes,
                const std::string& where) {
  if (available_bytes <= 0 || config.train.allow_oversubscribe) return;
  MemoryEstimate m;
  try {
    m = memory_per_rank(config, mesh);
  } catch (const Error& e) {
    // A config the estimate cannot read meets its own error where the trainer uses it.
    log::debug(std::string("memory check skipped: ") + e.what());
    return;
  }
  const double need = m.total();
  if (need <= available_bytes) return;
  const auto& t = config.train;
  std::string fixes = "more ranks (--nproc-per-node, more nodes)";
  if (config.parallel.plan.empty())
    fixes +=
        ", a plan that shards the model (parallel.plan, e.g. a tp or pp plan in configs/plans)";
  if (m.zero < 3)
    fixes += m.zero < 1 ? ", ZeRO over the data ranks (parallel.zero=1, 2 or 3)"
                        : ", ZeRO-3 (parallel.zero=3)";
  if (!t.activation_checkpointing)
    fixes += ", activation checkpointing (train.activation_checkpointing=true)";
  fixes += ", a smaller train.batch_size or train.seq_len";
  throw InputError(detail::cat(
      "model.", config.model.type, " does not fit: each rank needs about ", gib(need), " (params ",
      gib(m.param_bytes), ", grads ", gib(m.grad_bytes), ", optimizer ", gib(m.optimizer_bytes),
      ", activations ", gib(m.activation_bytes), "; the --dry-run estimate) but has ",
      gib(available_bytes), ", ", where, ". Make it fit with ", fixes,
      "; or set train.allow_oversubscribe=true to start anyway"));
}

}  // namespace vescale::train
