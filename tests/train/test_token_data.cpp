// The .bin token reader and the data-parallel loader: round trips, every sample once per
// epoch across ranks, bitwise resume, and clear errors.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "vescale/common/check.h"
#include "vescale/tokenizer/token_file.h"
#include "vescale/train/config.h"
#include "vescale/train/token_data.h"
#include "vescale/train/trainer.h"

using namespace vescale::train;
using Catch::Matchers::Contains;
using vescale::tokenizer::TokenFileWriter;  // the writers: tokenizer/token_file.h
using vescale::tokenizer::truncate_token_file;
using vescale::tokenizer::write_token_file;

namespace {
std::string tmp(const std::string& name) {
  return "/tmp/vescale_data_test." + std::to_string(::getpid()) + "." + name;
}

std::vector<int64_t> iota(int64_t n, int64_t start = 0) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}
}  // namespace

TEST_CASE("token files round-trip as uint16 and uint32, across shards", "[data]") {
  auto a = tmp("a.bin"), b = tmp("b.bin");
  write_token_file(a, iota(1000));
  write_token_file(b, {70000, 5, 128255});  // needs uint32
  TokenDataset data({a, b});
  CHECK(data.size() == 1003);
  CHECK(data.token(0) == 0);
  CHECK(data.token(999) == 999);
  CHECK(data.token(1000) == 70000);
  CHECK(data.token(1002) == 128255);
  std::vector<int64_t> span(4);
  data.copy(998, 4, span.data());  // crosses the shard boundary
  CHECK(span == std::vector<int64_t>{998, 999, 70000, 5});
  std::ifstream f(a, std::ios::binary);
  int32_t header[3];
  f.read(reinterpret_cast<char*>(header), sizeof header);
  CHECK(header[0] == 20240520);  // llm.c's magic, version 1
  CHECK(header[1] == 1);
  std::remove(a.c_str());
  std::remove(b.c_str());
}

TEST_CASE("every sample is seen exactly once per epoch across data-parallel ranks", "[data]") {
  auto path = tmp("stream.bin");
  write_token_file(path, iota(4001));
  auto data = std::make_shared<TokenDataset>(std::vector<std::string>{path});
  const int64_t T = 10, B = 4, dp = 3;
  std::vector<DataLoader> loaders;
  for (int64_t r = 0; r < dp; ++r) loaders.emplace_back(data, B, T, r, dp, /*seed=*/42);
  CHECK(loaders[0].samples() == 400);
  const int64_t steps = loaders[0].steps_per_epoch();
  CHECK(steps == 400 / (B * dp));
  std::set<int64_t> seen;
  for (int64_t s = 0; s < steps; ++s)
    for (auto& l : loaders) {
      auto batch = l.next();
      CHECK(at::equal(batch.targets, batch.inputs + 1));  // next-token targets
      for (int64_t b = 0; b < B; ++b) {
        const int64_t first = batch.inputs[b][0].item<int64_t>();
        CHECK(first % T == 0);
        CHECK(seen.insert(first / T).second);  // never twice
      }
    }
  CHECK(static_cast<int64_t>(seen.size()) == steps * B * dp);
  // The next epoch reshuffles, deterministically.
  CHECK(loaders[0].sample_at(1, 0) != loaders[0].sample_at(0, 0));
  DataLoader again(data, B, T, 0, dp, 42);
  CHECK(again.sample_at(1, 7) == loaders[0].sample_at(1, 7));
  std::remove(path.c_str());
}

TEST_CASE("a resumed loader continues at the same position", "[data]") {
  auto path = tmp("resume.bin");
  write_token_file(path, iota(3001));
  auto data = std::make_shared<TokenDataset>(std::vector<std::string>{path});
  DataLoader a(data, 2, 16, 1, 2, 7);
  for (int i = 0; i < 5 + static_cast<int>(a.steps_per_epoch()); ++i)
    a.next();  // into the second epoch
  const auto pos = a.position();
  CHECK(pos.epoch == 1);
  DataLoader b(data, 2, 16, 1, 2, 7);
  b.seek(pos);
  for (int i = 0; i < 3; ++i) {
    auto x = a.next(), y = b.next();
    CHECK(at::equal(x.inputs, y.inputs));
    CHECK(at::equal(x.targets, y.targets));
  }
  CHECK_THROWS_WITH(b.seek({0, 10000}), Contains("cannot resume at epoch 0 step 10000"));
  std::remove(path.c_str());
}

TEST_CASE("token ids at or past the vocab size are an error naming the file, the id and its place",
          "[data]") {
  auto a = tmp("v_a.bin"), b = tmp("v_b.bin");
  write_token_file(a, iota(40));  // ids 0..39
  auto tokens = iota(40);
  tokens[17] = 70000;  // uint32 file
  write_token_file(b, tokens);
  auto data = std::make_shared<TokenDataset>(std::vector<std::string>{a, b});
  CHECK(data->locate(57) == std::make_pair(b, int64_t{17}));
  // Unshuffled, 8 x 9-token windows: batch 0 takes tokens [0, 72], which hold global token 57.
  DataLoader loader(data, 8, 9, 0, 1, 1, /*shuffle=*/false);
  loader.set_vocab_size(1000);
  CHECK_THROWS_WITH(loader.next(),
                    Contains("data: '" + b +
                             "' holds token id 70000 (token 17 of the file), outside "
                             "model.vocab_size = 1000") &&
                        Contains("set model.vocab_size to at least 70001"));
  // A vocab that covers every id, or no check at all: the same batch loads.
  DataLoader wide(data, 8, 9, 0, 1, 1, false), unchecked(data, 8, 9, 0, 1, 1, false);
  wide.set_vocab_size(70001);
  CHECK(wide.next().targets.max().item<int64_t>() == 70000);
  CHECK_NOTHROW(unchecked.next());
  // The smallest failing vocab is the id itself.
  DataLoader exact(data, 8, 9, 0, 1, 1, false);
  exact.set_vocab_size(70000);
  CHECK_THROWS(exact.next());
  for (auto& p : {a, b}) std::remove(p.c_str());
}

TEST_CASE("bad token files and sizes are named", "[data]") {
  CHECK_THROWS_WITH(TokenDataset({"/nonexistent.bin"}), Contains("cannot open '/nonexistent.bin'"));
  auto bad = tmp("bad.bin");
  {
    std::ofstream f(bad, std::ios::binary);
    std::vector<int32_t> header(256, 0);
    header[0] = 1234;
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
  }
  CHECK_THROWS_WITH(TokenDataset({bad}), Contains("has magic 1234 version 0"));
  auto cut = tmp("cut.bin");
  write_token_file(cut, iota(100));
  ::truncate(cut.c_str(), 1024 + 50);
  CHECK_THROWS_WITH(TokenDataset({cut}), Contains("claims 100 tokens"));
  auto small = tmp("small.bin");
  write_token_file(small, iota(50));
  auto data = std::make_shared<TokenDataset>(std::vector<std::string>{small});
  CHECK_THROWS_WITH(DataLoader(data, 8, 16, 0, 2, 1), Contains("fewer than one global batch"));
  for (auto& p : {bad, cut, small}) std::remove(p.c_str());
}

TEST_CASE("TokenFileWriter streams a shard and truncate_token_file cuts it", "[data]") {
  auto path = tmp("stream.bin");
  {
    TokenFileWriter w(path, 256);
    const auto a = iota(100), b = iota(50, 100);
    w.write(a.data(), a.size());
    w.write(b.data(), b.size());
    CHECK(w.count() == 150);
    std::vector<int64_t> bad = {256};
    CHECK_THROWS_WITH(w.write(bad.data(), 1), Contains("outside the vocabulary of 256"));
    w.close();
  }
  {
    TokenDataset data({path});
    CHECK(data.size() == 150);
    CHECK(data.token(149) == 149);
  }
  truncate_token_file(path, 120);
  {
    TokenDataset data({path});
    CHECK(data.size() == 120);
    CHECK(data.token(119) == 119);
  }
  CHECK_THROWS_WITH(truncate_token_file(path, 121), Contains("at least 121 tokens"));
  // uint32 once the vocabulary needs it, even when these ids would fit uint16.
  auto wide = tmp("wide.bin");
  {
    TokenFileWriter w(wide, 128256);
    const std::vector<int64_t> ids = {1, 128255};
    w.write(ids.data(), ids.size());
    w.close();
  }
  std::ifstream f(wide, std::ios::binary);
  int32_t header[3];
  f.read(reinterpret_cast<char*>(header), sizeof header);
  CHECK(header[0] == 20240801);
  CHECK(header[2] == 2);
  CHECK(TokenDataset({wide}).token(1) == 128255);
  std::remove(path.c_str());
  std::remove(wide.c_str());
}

TEST_CASE("data files: \"builtin:NAME\" is a file of the built-in data next to the binaries",
          "[data]") {
  vescale::train::DataConfig d;
  d.train = {"builtin:corpus_train.bin"};
  d.val = {"builtin:corpus_val.bin"};
  // The test binary sits in build/tests; the built-in data is in build/share/vescale/data (a
  // link to build/data), as an install has it in <prefix>/share/vescale/data.
  const auto train = vescale::train::data_files(d, "train");
  REQUIRE(train.size() == 1);
  CHECK(std::filesystem::path(train[0]).filename() == "corpus_train.bin");
  CHECK(std::filesystem::path(train[0]).parent_path().filename() == "data");
  CHECK(vescale::train::TokenDataset(train).size() > 1000);
  d.train = {"builtin:no_such.bin"};
  CHECK_THROWS_WITH(vescale::train::data_files(d, "train"),
                    Catch::Contains("share/vescale/data/no_such.bin' matches no file; build and "
                                    "install it (the builtin_data target, then cmake --install)"));
  // A config keeps the prefix (it is not a path next to the config file).
  const auto c = vescale::train::Config::from_json(
      R"({"data": {"train": "builtin:corpus_train.bin", "val": "builtin:corpus_val.bin"}})",
      "t.json", {}, "/tmp");
  CHECK(c.data.train == std::vector<std::string>{"builtin:corpus_train.bin"});
}
