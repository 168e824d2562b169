// vescale-tokenize: text files -> llm.c .bin token shards.
//   vescale-tokenize --input a.txt b.txt --output data/corpus [--tokenizer tokenizer.json]
//                    [--val-fraction 0.05] [--threads N]
// writes data/corpus_train.bin and data/corpus_val.bin (the last val-fraction of the tokens).
// Without --tokenizer each byte is a token (vocab 256). The text streams through: read in
// chunks cut where the tokenizer says the ids cannot change (BpeTokenizer::safe_cut), encoded
// on N threads, written in order as they finish; the files' counts are fixed at the end.
#include <CLI/CLI.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "vescale/common/check.h"
#include "vescale/common/error_text.h"
#include "vescale/tokenizer/bpe_tokenizer.h"
#include "vescale/tokenizer/byte_tokenizer.h"
#include "vescale/train/token_data.h"

namespace {

using vescale::tokenizer::BpeTokenizer;
using Ids = std::vector<int64_t>;

// The input files as one stream of bytes, refusing files that are not text.
class InputStream {
 public:
  explicit InputStream(const std::vector<std::string>& paths) : paths_(paths) {
    for (const auto& p : paths) {
      struct stat st {};
      VESCALE_CHECK(::stat(p.c_str(), &st) == 0, "cannot open '", p, "': ", std::strerror(errno));
      VESCALE_CHECK(S_ISREG(st.st_mode), "'", p, "' is not a regular file; pass text files");
      total_ += static_cast<uint64_t>(st.st_size);
    }
  }
  // Appends up to n bytes; false at the end of the last file.
  bool read(std::string& out, size_t n) {
    while (index_ < paths_.size()) {
      if (!file_.is_open()) {
        file_.open(paths_[index_], std::ios::binary);
        VESCALE_CHECK(file_.good(), "cannot open '", paths_[index_], "': ", std::strerror(errno));
        offset_ = 0;
      }
      const size_t start = out.size();
      out.resize(start + n);
      file_.read(out.data() + start, static_cast<std::streamsize>(n));
      const size_t got = static_cast<size_t>(file_.gcount());
      out.resize(start + got);
      // Text has no NUL; a file that does is an image, an archive, a .bin: say so, don't tokenize.
      if (const void* nul = std::memchr(out.data() + start, '\0', got))
        VESCALE_FAIL("'", paths_[index_], "' looks binary, not text (a NUL byte at offset ",
                     offset_ + (static_cast<const char*>(nul) - (out.data() + start)),
                     "); pass UTF-8 text files");
      offset_ += got;
      if (got > 0) return true;
      file_.close();
      ++index_;
    }
    return false;
  }
  uint64_t total_bytes() const { return total_; }

 private:
  std::vector<std::string> paths_;
  size_t index_ = 0;
  uint64_t offset_ = 0, total_ = 0;
  std::ifstream file_;
};

// A fixed set of workers (each keeps its tokenizer cache warm) encoding chunks; results come
// back as futures, taken in submission order.
class EncodePool {
 public:
  using Encode = std::function<void(const std::string&, bool, Ids&)>;
  EncodePool(int threads, Encode encode) : encode_(std::move(encode)) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~EncodePool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  std::future<Ids> submit(std::string text, bool first) {
    Job job{std::move(text), first, {}};
    auto f = job.result.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
    return f;
  }

 private:
  struct Job {
    std::string text;
    bool first;
    std::promise<Ids> result;
  };
  void work() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      try {
        Ids ids;
        encode_(job.text, job.first, ids);
        job.result.set_value(std::move(ids));
      } catch (...) {
        job.result.set_exception(std::current_exception());
      }
    }
  }
  Encode encode_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// "[=====>    ]  45%  12.3 / 27.0 MB  3.1M tokens  5.2 MB/s" on stderr, when it is a terminal.
class Progress {
 public:
  explicit Progress(uint64_t total) : total_(total), tty_(::isatty(2)) {}
  void update(uint64_t done, int64_t tokens, bool last = false) {
    if (!tty_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!last && now - drawn_ < std::chrono::milliseconds(100)) return;
    drawn_ = now;
    const double frac = total_ ? std::min(1.0, double(done) / double(total_)) : 1.0;
    const double secs = std::chrono::duration<double>(now - start_).count();
    char bar[31];
    const int fill = static_cast<int>(frac * 30);
    for (int i = 0; i < 30; ++i) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[30] = '\0';
    std::fprintf(stderr, "\r[%s] %3.0f%%  %.1f / %.1f MB  %.2fM tokens  %.1f MB/s%s", bar,
                 frac * 100, done / 1e6, total_ / 1e6, tokens / 1e6,
                 secs > 0 ? done / 1e6 / secs : 0.0, last ? "\n" : "");
    std::fflush(stderr);
  }

 private:
  uint64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), drawn_{};
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "vescale-tokenize: text to .bin token shards (a Hugging Face tokenizer.json, or bytes)"};
  std::vector<std::string> inputs;
  std::string output, tokenizer_path;
  double val_fraction = 0.05;
  int threads = std::max(1u, std::thread::hardware_concurrency());
  size_t chunk_bytes = 4 << 20;
  app.add_option("--input", inputs, "text files, concatenated in order")->required();
  app.add_option("--output", output, "output prefix: writes PREFIX_train.bin and PREFIX_val.bin")
      ->required();
  app.add_option("--tokenizer", tokenizer_path,
                 "a Hugging Face tokenizer.json (byte-level BPE); without it, one token per byte");
  app.add_option("--val-fraction", val_fraction, "share of the tokens held out for validation")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--threads", threads, "encoding threads (default: one per core)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--chunk-bytes", chunk_bytes, "bytes read per chunk (default 4 MiB)")
      ->check(CLI::Range(size_t{64}, size_t{1} << 32));
  CLI11_PARSE(app, argc, argv);
  try {
    std::optional<BpeTokenizer> bpe;
    if (!tokenizer_path.empty()) bpe = BpeTokenizer::from_file(tokenizer_path);
    const int64_t vocab = bpe ? bpe->vocab_size() : vescale::tokenizer::ByteTokenizer::kVocabSize;
    auto encode = [&](const std::string& text, bool first, Ids& out) {
      if (bpe)
        bpe->encode_chunk(text, first, out);
      else
        out = vescale::tokenizer::ByteTokenizer::encode(text);
    };
    auto cut = [&](const std::string& buf) { return bpe ? bpe->safe_cut(buf) : buf.size(); };

    InputStream in(inputs);
    const std::string train_path = output + "_train.bin", val_path = output + "_val.bin";
    vescale::train::TokenFileWriter train(train_path, vocab);
    Progress progress(in.total_bytes());
    uint64_t bytes_done = 0;
    auto write = [&](const Ids& ids, size_t bytes) {
      train.write(ids.data(), ids.size());
      bytes_done += bytes;
      progress.update(bytes_done, train.count());
    };

    // Read, cut, encode (on the pool unless one thread), write in order.
    std::optional<EncodePool> pool;
    if (threads > 1) pool.emplace(threads, encode);
    std::deque<std::pair<std::future<Ids>, size_t>> pending_chunks;
    std::string buffer;
    bool first = true, more = true;
    while (more || !buffer.empty()) {
      if (more) more = in.read(buffer, chunk_bytes);
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
        pending_chunks.emplace_back(pool->submit(std::move(chunk), first), n);
        while (pending_chunks.size() > 2 * static_cast<size_t>(threads)) {
          write(pending_chunks.front().first.get(), pending_chunks.front().second);
          pending_chunks.pop_front();
        }
      }
      first = false;
    }
    for (auto& [f, n] : pending_chunks) write(f.get(), n);
    progress.update(bytes_done, train.count(), /*last=*/true);
    const int64_t total = train.count();
    train.close();

    // The last val-fraction of the tokens moves to the val file.
    const int64_t n_val = static_cast<int64_t>(static_cast<double>(total) * val_fraction);
    {
      vescale::train::TokenFileWriter val(val_path, vocab);
      if (n_val > 0) {
        vescale::train::TokenDataset all({train_path});
        Ids block;
        for (int64_t at = total - n_val; at < total;) {
          const int64_t n = std::min<int64_t>(1 << 20, total - at);
          block.resize(n);
          all.copy(at, n, block.data());
          val.write(block.data(), block.size());
          at += n;
        }
      }
      val.close();
    }
    vescale::train::truncate_token_file(train_path, total - n_val);
    std::printf("vescale-tokenize: %llu bytes, %lld tokens (%s) -> %s (%lld), %s (%lld)\n",
                static_cast<unsigned long long>(bytes_done), static_cast<long long>(total),
                bpe ? tokenizer_path.c_str() : "bytes", train_path.c_str(),
                static_cast<long long>(total - n_val), val_path.c_str(),
                static_cast<long long>(n_val));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vescale-tokenize: %s\n", vescale::error_text(e).c_str());
    return 1;
  }
}
