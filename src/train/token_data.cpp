#include "vescale/train/token_data.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>

#include "vescale/common/check.h"
#include "vescale/random/philox.h"
#include "vescale/tokenizer/token_file.h"

namespace vescale::train {

namespace {
// The format's constants live where the files are written (tokenizer/token_file.h).
constexpr int32_t kMagicU16 = tokenizer::kTokenFileMagicU16;
constexpr int32_t kVersionU16 = tokenizer::kTokenFileVersionU16;
constexpr int32_t kMagicU32 = tokenizer::kTokenFileMagicU32;
constexpr int32_t kVersionU32 = tokenizer::kTokenFileVersionU32;
constexpr size_t kHeaderBytes = tokenizer::kTokenFileHeaderBytes;
}  // namespace

struct TokenDataset::Shard {
  std::string path;
  void* map = MAP_FAILED;
  size_t bytes = 0;
  int64_t tokens = 0;
  int width = 2;  // bytes per token
  const uint8_t* body() const { return static_cast<const uint8_t*>(map) + kHeaderBytes; }
  ~Shard() {
    if (map != MAP_FAILED) munmap(map, bytes);
  }
};

TokenDataset::TokenDataset(const std::vector<std::string>& paths) {
  VESCALE_CHECK(!paths.empty(),
                "data: no token files given; set data.train to one or more .bin files");
  for (const auto& path : paths) {
    auto s = std::make_unique<Shard>();
    s->path = path;
    int fd = ::open(path.c_str(), O_RDONLY);
    VESCALE_CHECK(fd >= 0, "data: cannot open '", path, "': ", std::strerror(errno),
                  "; make token files with vescale-tokenize");
    struct stat st {};
    ::fstat(fd, &st);
    s->bytes = static_cast<size_t>(st.st_size);
    if (s->bytes >= kHeaderBytes) s->map = ::mmap(nullptr, s->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    VESCALE_CHECK(s->bytes >= kHeaderBytes && s->map != MAP_FAILED, "data: '", path, "' is ",
                  s->bytes, " bytes, shorter than the 1024-byte header of a .bin token file");
    const auto* h = static_cast<const int32_t*>(s->map);
    if (h[0] == kMagicU16 && h[1] == kVersionU16)
      s->width = 2;
    else if (h[0] == kMagicU32 && h[1] == kVersionU32)
      s->width = 4;
    else
      VESCALE_FAIL("data: '", path, "' has magic ", h[0], " version ", h[1], "; expected llm.c's ",
                   kMagicU16, "/1 (uint16 tokens) or ", kMagicU32, "/7 (uint32 tokens)");
    s->tokens = h[2];
    const size_t need = kHeaderBytes + static_cast<size_t>(s->tokens) * s->width;
    VESCALE_CHECK(h[2] >= 0 && s->bytes >= need, "data: '", path, "' claims ", h[2], " tokens (",
                  need, " bytes) but has ", s->bytes, " bytes; the file is truncated");
    starts_.push_back(total_);
    total_ += s->tokens;
    shards_.push_back(std::move(s));
  }
}

TokenDataset::~TokenDataset() = default;

int64_t TokenDataset::token(int64_t i) const {
  int64_t out;
  copy(i, 1, &out);
  return out;
}

void TokenDataset::copy(int64_t begin, int64_t n, int64_t* out) const {
  VESCALE_CHECK(begin >= 0 && n >= 0 && begin + n <= total_, "data: tokens [", begin, ", ",
                begin + n, ") are outside the ", total_, " tokens");
  while (n > 0) {
    const size_t k = std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin() - 1;
    const Shard& s = *shards_[k];
    const int64_t local = begin - starts_[k], take = std::min(n, s.tokens - local);
    for (int64_t i = 0; i < take; ++i) {
      if (s.width == 2) {
        uint16_t v;
        std::memcpy(&v, s.body() + (local + i) * 2, 2);
        out[i] = v;
      } else {
        uint32_t v;
        std::memcpy(&v, s.body() + (local + i) * 4, 4);
        out[i] = v;
      }
    }
    out += take;
    begin += take;
    n -= take;
  }
}

std::pair<std::string, int64_t> TokenDataset::locate(int64_t i) const {
  VESCALE_CHECK(i >= 0 && i < total_, "data: token ", i, " is outside the ", total_, " tokens");
  const size_t k = std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin() - 1;
  return {shards_[k]->path, i - starts_[k]};
}

DataLoader::DataLoader(std::shared_ptr<const TokenDataset> data, int64_t batch, int64_t seq_len,
                       int64_t dp_rank, int64_t dp_size, uint64_t seed, bool shuffle)
    : data_(std::move(data)),
      batch_(batch),
      seq_len_(seq_len),
      dp_rank_(dp_rank),
      dp_size_(dp_size),
      seed_(seed),
      shuffle_(shuffle) {
  VESCALE_CHECK(batch > 0 && seq_len > 0, "data: batch (", batch, ") and seq_len (", seq_len,
                ") must be positive");
  VESCALE_CHECK(dp_size > 0 && dp_rank >= 0 && dp_rank < dp_size, "data: dp rank ", dp_rank,
                " is outside [0, ", dp_size, ")");
  samples_ = data_->size() > 0 ? (data_->size() - 1) / seq_len : 0;
  VESCALE_CHECK(steps_per_epoch() > 0, "data: ", data_->size(), " tokens make ", samples_,
                " samples of ", seq_len, " tokens, fewer than one global batch (", batch, " x ",
                dp_size, " ranks); use more data or a smaller batch or seq_len");
}

int64_t DataLoader::sample_at(int64_t epoch, int64_t i) const {
  if (!shuffle_) return i;
  if (order_epoch_ != epoch) {
    // A shuffle keyed by (seed, epoch): sort the samples by a Philox hash of their index.
    order_.resize(samples_);
    std::iota(order_.begin(), order_.end(), 0);
    std::vector<uint64_t> key(samples_);
    for (int64_t k = 0; k < samples_; ++k) {
      auto r = random::philox4x32_10(
          random::Philox4{{static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32),
                           static_cast<uint32_t>(epoch), 0x5eedu}},
          static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32));
      key[k] = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    }
    std::sort(order_.begin(), order_.end(),
              [&](int64_t a, int64_t b) { return key[a] != key[b] ? key[a] < key[b] : a < b; });
    order_epoch_ = epoch;
  }
  return order_[i];
}

namespace {

[[noreturn]] void fail_id(const TokenDataset& data, int64_t token, int64_t id, int64_t vocab_size,
                          const std::string& field) {
  const auto [path, index] = data.locate(token);
  VESCALE_FAIL(field, ": '", path, "' holds token id ", id, " (token ", index,
               " of the file), outside ", "model.vocab_size = ", vocab_size,
               "; the data was tokenized for another vocabulary. ",
               "Tokenize it for this model, or set model.vocab_size to at least ", id + 1);
}

}  // namespace

void TokenDataset::check_ids(int64_t begin, int64_t n, int64_t vocab_size,
                             const std::string& field) const {
  const int64_t end = std::min(total_, begin + n);
  std::vector<int64_t> chunk;
  for (int64_t at = begin; at < end; at += static_cast<int64_t>(chunk.size())) {
    chunk.resize(static_cast<size_t>(std::min<int64_t>(end - at, 1 << 16)));
    copy(at, static_cast<int64_t>(chunk.size()), chunk.data());
    for (size_t k = 0; k < chunk.size(); ++k)
      if (chunk[k] < 0 || chunk[k] >= vocab_size)
        fail_id(*this, at + static_cast<int64_t>(k), chunk[k], vocab_size, field);
  }
}

DataLoader::Batch DataLoader::next() {
  if (pos_.step >= steps_per_epoch()) {
    pos_.epoch += 1;
    pos_.step = 0;
  }
  at::Tensor window = at::empty({batch_, seq_len_ + 1}, at::kLong);
  auto* w = window.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch_; ++b) {
    const int64_t i = (pos_.step * dp_size_ + dp_rank_) * batch_ + b;
    data_->copy(sample_at(pos_.epoch, i) * seq_len_, seq_len_ + 1, w + b * (seq_len_ + 1));
  }
  // One max per batch. An id past the vocabulary would index out of the embedding (one rank)
  // or be masked as another rank's row (a vocab-parallel embedding): loss 0, silently.
  if (vocab_size_ > 0 && *std::max_element(w, w + window.numel()) >= vocab_size_) {
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t t = 0; t <= seq_len_; ++t) {
        const int64_t id = w[b * (seq_len_ + 1) + t];
        if (id < vocab_size_) continue;
        const int64_t i = (pos_.step * dp_size_ + dp_rank_) * batch_ + b;
        fail_id(*data_, sample_at(pos_.epoch, i) * seq_len_ + t, id, vocab_size_, "data");
      }
    }
  }
  pos_.step += 1;
  return {window.narrow(1, 0, seq_len_).contiguous(), window.narrow(1, 1, seq_len_).contiguous()};
}

void DataLoader::seek(const LoaderPosition& pos) {
  VESCALE_CHECK(pos.epoch >= 0 && pos.step >= 0 && pos.step <= steps_per_epoch(),
                "data: cannot resume at epoch ", pos.epoch, " step ", pos.step, "; an epoch has ",
                steps_per_epoch(), " steps with this batch and world");
  pos_ = pos;
}

}  // namespace vescale::train
