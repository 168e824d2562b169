// vescale-tokenize: text files -> llm.c .bin token shards.
//   vescale-tokenize --input a.txt b.txt --output data/corpus [--tokenizer tokenizer.json]
//                    [--val-fraction 0.05] [--threads N] [--chunk-bytes B]
// writes data/corpus_train.bin and data/corpus_val.bin (the last val-fraction of the tokens).
// Without --tokenizer each byte is a token (vocab 256). The work is the tokenizer layer's
// stream_tokenize (streaming, threads); this file is its command line and progress bar.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "vescale/common/error_text.h"
#include "vescale/tokenizer/stream_tokenize.h"

namespace {

// "[=====>    ]  45%  12.3 / 27.0 MB  3.1M tokens  5.2 MB/s" on stderr, when it is a terminal.
class Progress {
 public:
  Progress() : tty_(::isatty(2)) {}
  void update(uint64_t done, uint64_t total, int64_t tokens, bool last = false) {
    if (!tty_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!last && now - drawn_ < std::chrono::milliseconds(100)) return;
    drawn_ = now;
    const double frac = total ? std::min(1.0, double(done) / double(total)) : 1.0;
    const double secs = std::chrono::duration<double>(now - start_).count();
    char bar[31];
    const int fill = static_cast<int>(frac * 30);
    for (int i = 0; i < 30; ++i) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[30] = '\0';
    std::fprintf(stderr, "\r[%s] %3.0f%%  %.1f / %.1f MB  %.2fM tokens  %.1f MB/s%s", bar,
                 frac * 100, done / 1e6, total / 1e6, tokens / 1e6,
                 secs > 0 ? done / 1e6 / secs : 0.0, last ? "\n" : "");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), drawn_{};
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "vescale-tokenize: text to .bin token shards (a Hugging Face tokenizer.json, or bytes)"};
  vescale::tokenizer::StreamTokenizeOptions o;
  std::string tokenizer_path;
  o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--input", o.inputs, "text files, concatenated in order")->required();
  app.add_option("--output", o.output, "output prefix: writes PREFIX_train.bin and PREFIX_val.bin")
      ->required();
  app.add_option("--tokenizer", tokenizer_path,
                 "a Hugging Face tokenizer.json (byte-level BPE); without it, one token per byte");
  app.add_option("--val-fraction", o.val_fraction, "share of the tokens held out for validation")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--threads", o.threads, "encoding threads (default: one per core)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--chunk-bytes", o.chunk_bytes, "bytes read per chunk (default 4 MiB)")
      ->check(CLI::Range(size_t{64}, size_t{1} << 32));
  CLI11_PARSE(app, argc, argv);
  try {
    if (!tokenizer_path.empty())
      o.tokenizer = vescale::tokenizer::BpeTokenizer::from_file(tokenizer_path);
    Progress progress;
    uint64_t all = 0;
    int64_t tokens = 0;
    o.progress = [&](uint64_t done, uint64_t total, int64_t n) {
      all = total;
      tokens = n;
      progress.update(done, total, n);
    };
    const auto r = vescale::tokenizer::stream_tokenize(o);
    progress.update(r.bytes, all, tokens, /*last=*/true);
    std::printf("vescale-tokenize: %llu bytes, %lld tokens (%s) -> %s (%lld), %s (%lld)\n",
                static_cast<unsigned long long>(r.bytes),
                static_cast<long long>(r.train_tokens + r.val_tokens),
                o.tokenizer ? tokenizer_path.c_str() : "bytes", r.train_path.c_str(),
                static_cast<long long>(r.train_tokens), r.val_path.c_str(),
                static_cast<long long>(r.val_tokens));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vescale-tokenize: %s\n", vescale::error_text(e).c_str());
    return 1;
  }
}
