// The pipeline of HF's TokenizerImpl::encode for byte-level BPE: split out the non-normalized
// added tokens, normalize each segment between them (NFC, if the file says so), split out the
// normalized added tokens, give each remaining text segment ByteLevel's prefix space, cut it into
// pieces with the pre-tokenizer, and BPE-encode each piece on its raw bytes (the byte-level
// alphabet is a bijection, so the model never needs the mapped strings). Decode is the ByteLevel
// decoder: each token's bytes, concatenated.
#include "vescale/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/nfc.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "vescale/common/check.h"

namespace vescale::tokenizer {

struct BpeTokenizer::Impl {
  Impl(const TokenizerSpec& spec, const std::string& source);

  void encode(std::string_view text, bool prefix_space_first, std::vector<int64_t>& out) const;
  void encode_segment(std::string_view seg, bool prefix_space, std::vector<int64_t>& out,
                      BpeScratch& s) const;

  uint64_t uid;  // keys the per-thread caches
  BpeModel model;
  SplitPattern pattern;
  Normalizer normalizer;
  bool add_prefix_space;
  AddedTokenMatcher exact, normalized;  // added tokens by HF's two passes
  std::vector<int64_t> prefix_ids, suffix_ids;
  // decode: id -> [off, off + len) of `bytes`; len < 0 where no token has the id.
  std::string bytes;
  std::vector<std::pair<int64_t, int64_t>> spans;
  std::vector<bool> special;
  std::unordered_map<std::string, int64_t> token_ids;
};

namespace {

std::atomic<uint64_t> next_uid{1};

// One thread's scratch and piece cache, for the tokenizer it last served. A thread that
// alternates between tokenizers restarts its cache at each switch (correct, only slower).
struct ThreadState {
  uint64_t owner = 0;
  BpeScratch scratch;
};

BpeScratch& scratch_for(uint64_t uid) {
  thread_local ThreadState state;
  if (state.owner != uid) {
    state.scratch.cache.clear();
    state.scratch.cache_ids.clear();
    state.owner = uid;
  }
  return state.scratch;
}

// A segment with its prefix space.
std::string& segment_buffer() {
  thread_local std::string buffer;
  return buffer;
}

// A segment normalized.
std::string& normalized_buffer() {
  thread_local std::string buffer;
  return buffer;
}

bool all_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; });
}

}  // namespace

BpeTokenizer::Impl::Impl(const TokenizerSpec& spec, const std::string& source)
    : uid(next_uid++),
      model(spec.model, source),
      pattern(spec.pattern),
      normalizer(spec.normalizer),
      add_prefix_space(spec.add_prefix_space),
      prefix_ids(spec.prefix_ids),
      suffix_ids(spec.suffix_ids) {
  int64_t size = 0;
  for (const auto& [token, id] : spec.model.vocab) size = std::max(size, id + 1);
  for (const auto& a : spec.added_tokens) size = std::max(size, a.id + 1);
  for (int64_t id : prefix_ids) size = std::max(size, id + 1);
  for (int64_t id : suffix_ids) size = std::max(size, id + 1);
  // The decode table is dense; ids far past the token count are a malformed file, not a reason
  // to allocate gigabytes.
  const int64_t count = static_cast<int64_t>(spec.model.vocab.size() + spec.added_tokens.size());
  VESCALE_CHECK(size <= 2 * count + 65536, source, ": the largest id is ", size - 1, " for ", count,
                " tokens; ids must be (nearly) dense");
  spans.assign(size, {0, -1});
  special.assign(size, false);
  auto set_bytes = [&](int64_t id, std::string_view b) {
    spans[id] = {static_cast<int64_t>(bytes.size()), static_cast<int64_t>(b.size())};
    bytes.append(b);
  };
  for (const auto& [token, id] : spec.model.vocab) {
    // A token outside the alphabet decodes as its own UTF-8 (HF's ByteLevel decoder does so).
    const auto raw = byte_level_to_bytes(token);
    set_bytes(id, raw ? std::string_view(*raw) : std::string_view(token));
    token_ids.emplace(token, id);
  }
  for (const auto& a : spec.added_tokens) {
    // Added tokens decode as their text, so that decode(encode(x)) == x holds for them too.
    set_bytes(a.id, a.content);
    special[a.id] = a.special;
    token_ids[a.content] = a.id;
    // HF matches a normalized token's normalized content in the normalized text.
    std::string nfc_content;
    if (a.normalized && normalizer == Normalizer::kNfc && nfc::normalize(a.content, nfc_content))
      normalized.add(nfc_content, static_cast<int32_t>(a.id));
    else
      (a.normalized ? normalized : exact).add(a.content, static_cast<int32_t>(a.id));
  }
  for (int64_t id : prefix_ids)
    VESCALE_CHECK(spans[id].second >= 0, source, ": post_processor's template adds id ", id,
                  ", which no token has");
  for (int64_t id : suffix_ids)
    VESCALE_CHECK(spans[id].second >= 0, source, ": post_processor's template adds id ", id,
                  ", which no token has");
}

void BpeTokenizer::Impl::encode_segment(std::string_view seg, bool prefix_space,
                                        std::vector<int64_t>& out, BpeScratch& s) const {
  if (seg.empty()) return;
  if (prefix_space && add_prefix_space && seg[0] != ' ') {
    std::string& buf = segment_buffer();
    buf.assign(1, ' ');
    buf.append(seg);
    seg = buf;
  }
  const auto* t = reinterpret_cast<const uint8_t*>(seg.data());
  const size_t n = seg.size();
  for (size_t p = 0; p < n;) {
    const size_t e = next_piece(pattern, t, n, p);
    model.encode_piece(seg.substr(p, e - p), out, s);
    p = e;
  }
}

void BpeTokenizer::Impl::encode(std::string_view text, bool prefix_space_first,
                                std::vector<int64_t>& out) const {
  BpeScratch& s = scratch_for(uid);
  bool first = true;
  // Pass 2: the normalized added tokens inside a segment the first pass left, normalized.
  auto inner = [&](std::string_view seg) {
    std::string& nbuf = normalized_buffer();
    if (normalizer == Normalizer::kNfc && nfc::normalize(seg, nbuf)) seg = nbuf;
    for (size_t p = 0; p < seg.size();) {
      const auto m = normalized.find(seg, p);
      const size_t end = m.pos == std::string_view::npos ? seg.size() : m.pos;
      if (end > p) encode_segment(seg.substr(p, end - p), prefix_space_first || !first, out, s);
      first = false;
      if (m.pos == std::string_view::npos) break;
      out.push_back(m.id);
      p = m.pos + m.len;
    }
  };
  for (size_t p = 0; p <= text.size();) {
    const auto m = exact.find(text, p);
    const size_t end = m.pos == std::string_view::npos ? text.size() : m.pos;
    if (end > p) inner(text.substr(p, end - p));
    first = false;
    if (m.pos == std::string_view::npos) break;
    out.push_back(m.id);
    p = m.pos + m.len;
  }
}

BpeTokenizer BpeTokenizer::from_json(const std::string& text, const std::string& source) {
  return BpeTokenizer(std::make_shared<const Impl>(parse_tokenizer_json(text, source), source));
}

BpeTokenizer BpeTokenizer::from_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  VESCALE_CHECK(f.good(), "tokenizer: cannot open '", path,
                "'; pass a Hugging Face tokenizer.json (e.g. data/tokenizer_bpe2048.json)");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json(ss.str(), path);
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 8);
  if (add_special_tokens) out.insert(out.end(), impl_->prefix_ids.begin(), impl_->prefix_ids.end());
  impl_->encode(text, true, out);
  if (add_special_tokens) out.insert(out.end(), impl_->suffix_ids.begin(), impl_->suffix_ids.end());
  return out;
}

void BpeTokenizer::encode_chunk(std::string_view chunk, bool first,
                                std::vector<int64_t>& out) const {
  impl_->encode(chunk, first, out);
}

size_t BpeTokenizer::safe_cut(std::string_view text) const {
  // Room after the cut for the checks' look-ahead and for an added token over it.
  const size_t margin =
      std::max({size_t{2}, impl_->exact.max_length(), impl_->normalized.max_length()});
  if (text.size() <= margin + 2) return 0;
  const auto* t = reinterpret_cast<const uint8_t*>(text.data());
  // Normalization can make a normalized added token appear over a cut that the raw text has no
  // token over; around ASCII it changes nothing, so there the raw text's check holds.
  const bool ascii_only = impl_->normalizer != Normalizer::kNone && !impl_->normalized.empty();
  for (size_t b = text.size() - margin; b >= 2; --b) {
    if (!is_safe_cut(impl_->pattern, t, text.size(), b)) continue;
    if (impl_->exact.touches(text, b) || impl_->normalized.touches(text, b)) continue;
    if (ascii_only && !all_ascii(text.substr(b < margin ? 0 : b - margin, 2 * margin))) continue;
    return b;
  }
  return 0;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::string out;
  out.reserve(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    VESCALE_CHECK(id >= 0 && id < static_cast<int64_t>(m.spans.size()) && m.spans[id].second >= 0,
                  "tokenizer: id ", id, " at position ", i, " is no token of this vocabulary (",
                  m.spans.size(), " ids); were the ids made with another tokenizer?");
    if (skip_special_tokens && m.special[id]) continue;
    out.append(m.bytes, m.spans[id].first, m.spans[id].second);
  }
  return out;
}

int64_t BpeTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->spans.size()); }

std::optional<int64_t> BpeTokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->token_ids.find(std::string(token));
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

}  // namespace vescale::tokenizer
