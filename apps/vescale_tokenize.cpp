// vescale-tokenize: text files -> llm.c .bin token shards with the byte tokenizer.
//   vescale-tokenize --input a.txt b.txt --output data/corpus --val-fraction 0.05
// writes data/corpus_train.bin and data/corpus_val.bin (the last val-fraction of the text).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "vescale/common/check.h"
#include "vescale/train/byte_tokenizer.h"
#include "vescale/train/token_data.h"

int main(int argc, char** argv) {
  CLI::App app{"vescale-tokenize: text to .bin token shards (byte tokenizer, vocab 256)"};
  std::vector<std::string> inputs;
  std::string output;
  double val_fraction = 0.05;
  app.add_option("--input", inputs, "text files, concatenated in order")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--output", output, "output prefix: writes PREFIX_train.bin and PREFIX_val.bin")
      ->required();
  app.add_option("--val-fraction", val_fraction, "share of the tokens held out for validation")
      ->check(CLI::Range(0.0, 0.5));
  CLI11_PARSE(app, argc, argv);
  try {
    std::string text;
    for (auto& path : inputs) {
      std::ifstream f(path, std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      text += ss.str();
    }
    auto tokens = vescale::train::ByteTokenizer::encode(text);
    const size_t n_val = static_cast<size_t>(static_cast<double>(tokens.size()) * val_fraction);
    std::vector<int64_t> train(tokens.begin(), tokens.end() - static_cast<long>(n_val));
    std::vector<int64_t> val(tokens.end() - static_cast<long>(n_val), tokens.end());
    vescale::train::write_token_file(output + "_train.bin", train);
    vescale::train::write_token_file(output + "_val.bin", val);
    std::printf("vescale-tokenize: %zu tokens -> %s_train.bin (%zu), %s_val.bin (%zu)\n",
                tokens.size(), output.c_str(), train.size(), output.c_str(), val.size());
    return 0;
  } catch (const vescale::Error& e) {
    std::fprintf(stderr, "vescale-tokenize: %s\n", e.what());
    return 1;
  }
}
