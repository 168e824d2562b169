// Read, cut, encode (on the pool unless one thread), write in order; then the val split. At most
// 2 x threads chunks are in flight, so memory is a few chunks whatever the input's size.
#include "vescale/tokenizer/stream_tokenize.h"

#include <deque>
#include <future>
#include <utility>

#include "tokenizer/encode_pool.h"
#include "tokenizer/text_files.h"
#include "vescale/common/check.h"
#include "vescale/tokenizer/byte_tokenizer.h"
#include "vescale/tokenizer/token_file.h"

namespace vescale::tokenizer {

namespace {

using Ids = std::vector<int64_t>;

void check_options(const StreamTokenizeOptions& o) {
  VESCALE_CHECK(!o.inputs.empty(), "stream_tokenize: inputs is empty; name one or more text files");
  VESCALE_CHECK(!o.output.empty(),
                "stream_tokenize: output is empty; give a prefix such as data/corpus");
  VESCALE_CHECK(o.val_fraction >= 0.0 && o.val_fraction <= 0.5, "stream_tokenize: val_fraction ",
                o.val_fraction, " is outside [0, 0.5]");
  VESCALE_CHECK(o.threads >= 1, "stream_tokenize: threads is ", o.threads, "; use 1 or more");
  VESCALE_CHECK(o.chunk_bytes >= 1,
                "stream_tokenize: chunk_bytes is 0; use 1 or more (4 MiB is "
                "the default)");
}

}  // namespace

StreamTokenizeResult stream_tokenize(const StreamTokenizeOptions& o) {
  check_options(o);
  const std::optional<BpeTokenizer>& bpe = o.tokenizer;
  const int64_t vocab = bpe ? bpe->vocab_size() : ByteTokenizer::kVocabSize;
  auto encode = [&bpe](const std::string& text, bool first, Ids& out) {
    if (bpe)
      bpe->encode_chunk(text, first, out);
    else
      out = ByteTokenizer::encode(text);
  };
  auto cut = [&bpe](const std::string& buf) { return bpe ? bpe->safe_cut(buf) : buf.size(); };

  TextFiles in(o.inputs);
  StreamTokenizeResult r;
  r.train_path = o.output + "_train.bin";
  r.val_path = o.output + "_val.bin";
  TokenFileWriter train(r.train_path, vocab);
  auto write = [&](const Ids& ids, size_t bytes) {
    train.write(ids.data(), ids.size());
    r.bytes += bytes;
    if (o.progress) o.progress(r.bytes, in.total_bytes(), train.count());
  };

  std::optional<EncodePool> pool;
  if (o.threads > 1) pool.emplace(o.threads, encode);
  std::deque<std::pair<std::future<Ids>, size_t>> pending;  // ids and their bytes, in order
  std::string buffer;
  bool first = true, more = true;
  while (more || !buffer.empty()) {
    if (more) more = in.read(buffer, o.chunk_bytes);
    const size_t at = more ? cut(buffer) : buffer.size();
    if (at == 0) continue;  // no safe place to cut yet: read on
    std::string chunk = buffer.substr(0, at);
    buffer.erase(0, at);
    if (!pool) {
      Ids ids;
      encode(chunk, first, ids);
      write(ids, chunk.size());
    } else {
      const size_t n = chunk.size();
      pending.emplace_back(pool->submit(std::move(chunk), first), n);
      while (pending.size() > 2 * static_cast<size_t>(o.threads)) {
        write(pending.front().first.get(), pending.front().second);
        pending.pop_front();
      }
    }
    first = false;
  }
  for (auto& [ids, n] : pending) write(ids.get(), n);
  const int64_t total = train.count();
  train.close();

  // The last val_fraction of the tokens moves to the val file.
  r.val_tokens = static_cast<int64_t>(static_cast<double>(total) * o.val_fraction);
  r.train_tokens = total - r.val_tokens;
  split_token_file(r.train_path, r.val_path, r.val_tokens);
  return r;
}

}  // namespace vescale::tokenizer
