// Single-thread encode rate of BpeTokenizer: tokenizer_bench TOKENIZER_JSON TEXT RUNS.
// Each run encodes the whole text in one call; prints one JSON line per run. Run 0 starts with
// an empty piece cache (cold), later runs reuse it (warm), as HF's BPE cache does.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "vescale/tokenizer/bpe_tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: tokenizer_bench TOKENIZER_JSON TEXT RUNS\n");
    return 2;
  }
  const auto tok = vescale::tokenizer::BpeTokenizer::from_file(argv[1]);
  std::ifstream f(argv[2], std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  for (int run = 0; run < std::atoi(argv[3]); ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok.encode(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t hash = 1469598103934665603ull;  // FNV-1a of the ids: both sides must agree
    for (int64_t id : ids) hash = (hash ^ static_cast<uint64_t>(id)) * 1099511628211ull;
    std::printf(
        "{\"run\": %d, \"seconds\": %.6f, \"mbps\": %.3f, \"tokens\": %zu, \"hash\": "
        "\"%016llx\"}\n",
        run, s, text.size() / s / 1e6, ids.size(), static_cast<unsigned long long>(hash));
  }
  return 0;
}
