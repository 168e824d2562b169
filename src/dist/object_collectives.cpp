#include "vescale/dist/object_collectives.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "vescale/dist/world.h"

namespace vescale::dist {

namespace {
int size() { return is_initialized() ? world_size() : 1; }
}  // namespace

std::vector<int64_t> all_gather_int64(const std::vector<int64_t>& mine) {
  const int w = size();
  if (w == 1) return mine;
  const at::Device dev(device_string());  // NCCL moves device tensors only
  const auto n = static_cast<int64_t>(mine.size());
  auto local = at::tensor(mine, at::TensorOptions().dtype(at::kLong)).to(dev);
  auto all = at::empty({w * n}, local.options());
  world().all_gather(all, local).wait();
  const auto host = all.cpu();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + w * n);
}

// The lengths first, then the bytes padded to the longest.
std::vector<std::string> all_gather_text(const std::string& mine) {
  const int w = size();
  if (w == 1) return {mine};
  const auto lengths = all_gather_int64({static_cast<int64_t>(mine.size())});
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<std::string> out(w);
  if (longest == 0) return out;
  const at::Device dev(device_string());
  auto bytes = at::zeros({longest}, at::kByte);
  std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
  auto all = at::empty({w * longest}, bytes.options().device(dev));
  world().all_gather(all, bytes.to(dev)).wait();
  const auto host = all.cpu();
  for (int r = 0; r < w; ++r) {
    out[r].assign(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()) + r * longest,
                  static_cast<size_t>(lengths[r]));
  }
  return out;
}

int64_t all_max(int64_t mine) {
  const auto all = all_gather_int64({mine});
  return *std::max_element(all.begin(), all.end());
}

void barrier() {
  if (size() > 1) world().barrier().wait();
}

}  // namespace vescale::dist
