#include "vescale/dist/object_collectives.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "vescale/dist/world.h"

namespace vescale::dist {

int rank_or_zero() { return is_initialized() ? rank() : 0; }
int size_or_one() { return is_initialized() ? world_size() : 1; }

std::vector<int64_t> all_gather_int64(const std::vector<int64_t>& mine) {
  const int w = size_or_one();
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
  const int w = size_or_one();
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

std::vector<std::string> gather_text(const std::string& mine, int root) {
  const int w = size_or_one();
  if (w == 1) return {mine};
  constexpr int kLengthTag = 0x7200, kBytesTag = 0x7201;
  const at::Device dev(device_string());
  const auto longs = at::TensorOptions().dtype(at::kLong).device(dev);
  if (rank() != root) {
    world().send(at::full({1}, static_cast<int64_t>(mine.size()), longs), root, kLengthTag).wait();
    if (mine.empty()) return {};
    auto bytes = at::empty({static_cast<int64_t>(mine.size())}, at::kByte);
    std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
    world().send(bytes.to(dev), root, kBytesTag).wait();
    return {};
  }
  std::vector<std::string> out(w);
  out[root] = mine;
  for (int r = 0; r < w; ++r) {
    if (r == root) continue;
    auto length = at::empty({1}, longs);
    world().recv(length, r, kLengthTag).wait();
    const int64_t n = length.cpu().data_ptr<int64_t>()[0];
    if (n == 0) continue;
    auto bytes = at::empty({n}, at::TensorOptions().dtype(at::kByte).device(dev));
    world().recv(bytes, r, kBytesTag).wait();
    const auto host = bytes.cpu();
    out[r].assign(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), static_cast<size_t>(n));
  }
  return out;
}

int64_t all_max(int64_t mine) {
  const auto all = all_gather_int64({mine});
  return *std::max_element(all.begin(), all.end());
}

void barrier() {
  if (size_or_one() > 1) world().barrier().wait();
}

}  // namespace vescale::dist
