#include "train/trainer_internal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/nn/module.h>

#include "vescale/dtensor/dtensor.h"
#include "vescale/plan/parallel_dims.h"
#include "vescale/kernels/cross_entropy.h"

#include <cmath>
#include <cstdio>
#include <mutex>

#include "vescale/common/check.h"
#include "vescale/common/input_error.h"
#include "vescale/train/model_factory.h"
#include "vescale/common/error_text.h"
#include "vescale/common/logging.h"
#include "vescale/dist/object_collectives.h"

namespace vescale::train {

void check_writable_dir(const std::string& dir, const std::string& field) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  VESCALE_CHECK(!ec && fs::is_directory(dir), field, " '", dir,
                "' cannot be created: ", ec ? ec.message() : "a file of that name exists",
                "; choose a folder this user can write");
  const fs::path probe = fs::path(dir) / (".vescale-write-test." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  // A block, not a byte: a full disk often still takes a few bytes.
  const std::string block(4096, 'x');
  const bool ok = fd >= 0 &&
                  ::write(fd, block.data(), block.size()) == static_cast<ssize_t>(block.size()) &&
                  ::fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  fs::remove(probe, ec);
  VESCALE_CHECK(ok, field, " '", dir, "' is not writable: ", std::strerror(err),
                err == ENOSPC ? "; free space on its disk or choose another folder"
                              : "; choose a folder this user can write");
}

std::string message_of(const std::exception& e) {
  return error_text(e, /*with_stack=*/log::level() == "debug" || log::level() == "trace");
}

void on_all_ranks(const std::function<void()>& f) {
  // Each rank's message behind one letter: I for an InputError (kept as one on every rank: a
  // launcher must not restart it), E for any other.
  std::string mine;
  try {
    f();
  } catch (const std::exception& e) {
    const std::string text = message_of(e);
    mine = (dynamic_cast<const InputError*>(&e) ? "I" : "E") + (text.empty() ? "failed" : text);
  }
  const auto all = dist::all_gather_text(mine);
  auto raise = [](const std::string& tagged, const std::string& lead) {
    if (tagged[0] == 'I') throw InputError(lead + tagged.substr(1));
    throw Error(lead + tagged.substr(1));
  };
  if (!mine.empty()) raise(mine, "");
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) raise(all[r], "rank " + std::to_string(r) + " failed: ");
}

// The ZeRO stage: the config's, else the plan's; both set must agree.
int64_t zero_stage(const ParallelConfig& parallel, const plan::Plan* plan) {
  if (plan == nullptr || plan->zero() == 0) return parallel.zero;
  VESCALE_CHECK(parallel.zero == 0 || plan->zero() == parallel.zero,
                "parallel.zero=", parallel.zero, " but the plan ", plan->source(),
                " says zero=", plan->zero(), "; set one of them, or make them agree");
  return plan->zero();
}

std::string human(double x, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int k = 0;
  while (std::fabs(x) >= 1000 && k < 5) x /= 1000, ++k;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f%s%s", x, prefixes[k], unit);
  return buf;
}

std::string hms(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds));
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

DataShard data_shard(const mesh::DeviceMesh& mesh) {
  DataShard s;
  for (const auto& d : plan::ParallelDims(mesh.shape(), nullptr).data) {
    s.rank = s.rank * mesh.size(d) + mesh.coordinate(d);
    s.size *= mesh.size(d);
  }
  return s;
}

at::Tensor to_model_input(const at::Tensor& tokens, const mesh::DeviceMesh* mesh,
                          const at::Tensor& positions) {
  const at::Tensor local_tokens = positions.defined() ? tokens.index_select(1, positions) : tokens;
  if (mesh == nullptr || mesh->size() == 1) return local_tokens;
  dtensor::Placements placements(mesh->ndim(), dtensor::Replicate());
  auto global = local_tokens.sizes().vec();
  const auto& names = mesh->dim_names();
  const plan::ParallelDims dims(mesh->shape(), nullptr);
  for (size_t d = 0; d < names.size(); ++d) {
    if (!dims.is_data(names[d])) continue;
    placements[d] = dtensor::Shard(0);
    global[0] *= mesh->size(names[d]);
  }
  return dtensor::from_local(local_tokens, *mesh, placements, global);
}

Bf16Autocast::Bf16Autocast(bool on, at::DeviceType device) : on_(on), device_(device) {
  if (!on_) return;
  at::autocast::set_autocast_dtype(device_, at::kBFloat16);
  at::autocast::set_autocast_enabled(device_, true);
}

Bf16Autocast::~Bf16Autocast() {
  if (!on_) return;
  at::autocast::set_autocast_enabled(device_, false);
  at::autocast::clear_cache();
}

at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return kernels::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(at::kFloat),
                                targets.reshape({-1}));
}

std::string gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace vescale::train
