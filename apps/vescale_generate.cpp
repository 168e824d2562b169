// vescale-generate: text from a trained model on one process (docs/generate.md).
//   vescale-generate --checkpoint ckpt [--hf dir] --prompt "In the beginning" --max-new-tokens 200
//                    --temperature 0.8 --top-k 50 --top-p 0.95 --seed 1
// A checkpoint of any world size loads resharded to this process; the text streams to stdout.
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

#include "vescale/common/check.h"
#include "vescale/common/error_text.h"
#include "vescale/common/logging.h"
#include "vescale/generate/generate.h"
#include "vescale/tokenizer/text_tokenizer.h"
#include "vescale/train/load_model.h"

namespace {

std::vector<int64_t> parse_ids(const std::string& s) {
  std::vector<int64_t> ids;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      size_t used = 0;
      ids.push_back(std::stoll(item, &used));
      VESCALE_CHECK(used == item.size(), "");
    } catch (const std::exception&) {
      VESCALE_FAIL("--prompt-ids: '", item, "' is not a token id; give ids like 1,15,27");
    }
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  namespace vt = vescale::train;
  CLI::App app{"vescale-generate: text from a checkpoint or a Hugging Face folder"};
  std::string checkpoint, hf, prompt = "In the beginning", prompt_ids, tokenizer_path;
  vescale::generate::SamplingOptions s;
  bool greedy = false, print_ids = false;
  int threads = 0;
  auto* src = app.add_option("--checkpoint", checkpoint,
                             "our checkpoint: a step folder or a root with `latest`");
  app.add_option("--hf", hf, "a Hugging Face folder (config.json, model.safetensors)")
      ->excludes(src);
  app.add_option("--prompt", prompt, "the text to continue");
  app.add_option("--prompt-ids", prompt_ids, "the prompt as token ids (1,15,27), not text");
  app.add_option("--tokenizer", tokenizer_path,
                 "a Hugging Face tokenizer.json (default: the run's data.tokenizer, the folder's "
                 "tokenizer.json, else bytes)");
  app.add_option("--max-new-tokens", s.max_new_tokens, "tokens to generate");
  app.add_option("--temperature", s.temperature, "0: greedy");
  app.add_flag("--greedy", greedy, "the likeliest token each step (--temperature 0)");
  app.add_option("--top-k", s.top_k, "keep the k likeliest tokens (0: all)");
  app.add_option("--top-p", s.top_p, "keep the likeliest tokens whose mass reaches p (1: all)");
  app.add_option("--seed", s.seed, "same seed, same text");
  app.add_flag("--print-ids", print_ids, "print the new token ids, not text");
  app.add_option("--threads", threads, "libtorch threads (0: its default)");
  CLI11_PARSE(app, argc, argv);
  try {
    VESCALE_CHECK(!checkpoint.empty() || !hf.empty(),
                  "give --checkpoint (one of our checkpoints) or --hf (a Hugging Face folder)");
    vescale::log::init(0);  // on stderr: stdout is the text
    if (greedy) s.temperature = 0;
    vescale::generate::check_sampling(s, "--");
    if (threads > 0) at::set_num_threads(threads);
    const auto t0 = std::chrono::steady_clock::now();
    auto loaded = hf.empty() ? vt::load_checkpoint_model(checkpoint) : vt::load_hf_model(hf);
    if (tokenizer_path.empty()) tokenizer_path = loaded.config.data.tokenizer;
    if (tokenizer_path.empty() && !hf.empty() &&
        std::filesystem::exists(std::filesystem::path(hf) / "tokenizer.json"))
      tokenizer_path = (std::filesystem::path(hf) / "tokenizer.json").string();
    const vescale::tokenizer::TextTokenizer tok(tokenizer_path);
    const int64_t vocab = loaded.config.model.vocab_size();
    VESCALE_CHECK(!prompt_ids.empty() || !tokenizer_path.empty() || vocab == 256, "the model has ",
                  vocab, " tokens and no tokenizer was named (bytes have 256); pass --tokenizer ",
                  "tokenizer.json, the one its data was made with");
    VESCALE_CHECK(!prompt_ids.empty() || tok.vocab_size() <= vocab, "the tokenizer (", tok.name(),
                  ") has ", tok.vocab_size(), " tokens, the model only ", vocab,
                  "; pass the --tokenizer the model was trained with");
    const auto ids = prompt_ids.empty() ? tok.encode(prompt) : parse_ids(prompt_ids);
    if (prompt_ids.empty()) s.stop_ids = tok.stop_ids();
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr,
                 "vescale-generate: %s model (%lld layers) from %s in %.1f s; tokenizer %s\n",
                 loaded.config.model.type.c_str(),
                 static_cast<long long>(loaded.config.model.options->n_layers()),
                 hf.empty() ? checkpoint.c_str() : hf.c_str(), load_s, tok.name().c_str());
    std::vector<int64_t> out;
    size_t printed = 0;
    if (!print_ids) std::fwrite(prompt.data(), 1, prompt_ids.empty() ? prompt.size() : 0, stdout);
    const auto t1 = std::chrono::steady_clock::now();
    vescale::generate::generate(loaded.model, *loaded.config.model.options, ids, s, [&](int64_t token) {
      out.push_back(token);
      if (print_ids) return;
      // Byte-level: the text of a prefix is a prefix of the text; print what is new.
      const std::string text = tok.decode(out);
      if (text.size() > printed)
        std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
      printed = std::max(printed, text.size());
      std::fflush(stdout);
    });
    const double gen_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    if (print_ids)
      for (size_t i = 0; i < out.size(); ++i)
        std::printf("%s%lld", i ? "," : "", static_cast<long long>(out[i]));
    // The text ends its line before the statistics (stderr) start theirs.
    std::printf("\n");
    std::fflush(stdout);
    // Fewer tokens than asked: say why.
    const auto asked = static_cast<size_t>(s.max_new_tokens);
    if (out.size() < asked) {
      const bool stopped = !out.empty() && std::find(s.stop_ids.begin(), s.stop_ids.end(),
                                                     out.back()) != s.stop_ids.end();
      if (stopped)
        std::fprintf(stderr,
                     "vescale-generate: stopped at an end-of-text token: %zu of %zu tokens\n",
                     out.size(), asked);
      else
        std::fprintf(stderr, "vescale-generate: stopped at max_seq_len %lld: %zu of %zu tokens\n",
                     static_cast<long long>(loaded.config.model.max_seq_len()), out.size(), asked);
    }
    std::fprintf(stderr, "vescale-generate: %zu tokens in %.2f s (%.1f tok/s)\n", out.size(), gen_s,
                 static_cast<double>(out.size()) / std::max(gen_s, 1e-9));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vescale-generate: %s\n", vescale::error_text(e).c_str());
    return 1;
  }
}
