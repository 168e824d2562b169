// Streaming tokenization into llm.c .bin files (stream_tokenize): the files read back by hand
// (header fields, uint16 tokens) must hold the ids of one encode() of the whole text, whatever
// the chunk size and threads, also when a read or a file boundary falls inside a word or a UTF-8
// character; the val split (split_token_file, uint32 files too); errors that name the file or
// the field.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "tiny_tokenizer.h"
#include "vescale/common/check.h"
#include "vescale/tokenizer/stream_tokenize.h"
#include "vescale/tokenizer/token_file.h"

using namespace vescale::tokenizer;
using Catch::Matchers::Contains;
using Ids = std::vector<int64_t>;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("vescale_stream_test." + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name, const std::string& content) const {
    const std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
};

struct BinFile {
  int32_t magic = 0, version = 0, count = 0;
  Ids ids;
};

// llm.c's layout, read here without the library: 256 int32, then count uint16 or uint32.
BinFile read_bin(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string raw = ss.str();
  REQUIRE(raw.size() >= 1024);
  BinFile b;
  std::memcpy(&b.magic, raw.data(), 4);
  std::memcpy(&b.version, raw.data() + 4, 4);
  std::memcpy(&b.count, raw.data() + 8, 4);
  const size_t width = b.magic == 20240801 ? 4 : 2;
  REQUIRE(raw.size() == 1024 + width * static_cast<size_t>(b.count));
  for (int32_t i = 0; i < b.count; ++i) {
    uint32_t v = 0;
    std::memcpy(&v, raw.data() + 1024 + width * i, width);
    b.ids.push_back(v);
  }
  return b;
}

// Words, spaces, newlines, CJK, emoji, marks NFC joins, digits, an added token.
std::string mixed_text() {
  const char* words[] = {"the",     " ",     "beginning", "\n", "中文", "👍🏽",
                         "e\u0301", "DON'T", "12345",     "  ", "é\nx", "<|endoftext|>",
                         "\r\n",    " a"};
  std::mt19937 rng(11);
  std::string t;
  for (int i = 0; i < 4000; ++i) t += words[rng() % (sizeof(words) / sizeof(words[0]))];
  return t;
}

BpeTokenizer qwen2_tiny() {
  auto j = vescale::testing::tiny_tokenizer(vescale::testing::Layout::kQwen2,
                                            {{" ", " "}, {"t", "h"}, {"th", "e"}});
  vescale::testing::add_token(j, "<|endoftext|>", true, false);
  vescale::testing::add_token(j, "\u00e9\nx", false, true);  // normalized: NFC joins e + U+0301
  return BpeTokenizer::from_json(j.dump(), "<qwen2 tiny>");
}

}  // namespace

TEST_CASE("stream_tokenize writes the ids of one encode, whatever the chunks and threads",
          "[tokenizer]") {
  TempDir dir;
  // Reads of 64 bytes end inside a word and inside a 4-byte character: the 62-letter word and
  // U+1F44D at bytes 62..65. The two files meet inside a word and inside U+00E9 (0xC3 | 0xA9).
  const std::string head = std::string(62, 'w') + "\U0001F44D and more" + mixed_text() + "caf\xC3";
  const std::string tail = "\xA9 au lait\n" + mixed_text();
  REQUIRE((static_cast<uint8_t>(head[64]) & 0xC0) == 0x80);
  const std::vector<std::string> inputs = {dir.file("a.txt", head), dir.file("b.txt", tail)};
  const std::string text = head + tail;

  struct Case {
    std::string name;
    std::optional<BpeTokenizer> tok;
  };
  std::vector<Case> cases = {
      {"shipped GPT-2 style",
       BpeTokenizer::from_file(VESCALE_SOURCE_DIR "/data/tokenizer_bpe2048.json")},
      {"Qwen2 tiny (NFC)", qwen2_tiny()},
      {"bytes", std::nullopt}};
  for (const auto& c : cases) {
    Ids whole;
    if (c.tok)
      whole = c.tok->encode(text);
    else
      for (char ch : text) whole.push_back(static_cast<uint8_t>(ch));
    for (const auto& [chunk, threads] :
         std::vector<std::pair<size_t, int>>{{64, 1}, {64, 3}, {1000, 2}, {size_t{1} << 30, 1}}) {
      INFO(c.name << ", chunks of " << chunk << " bytes on " << threads << " threads");
      StreamTokenizeOptions o;
      o.inputs = inputs;
      o.output = (dir.path / "out").string();
      o.tokenizer = c.tok;
      o.val_fraction = 0.1;
      o.threads = threads;
      o.chunk_bytes = chunk;
      uint64_t last_done = 0, last_total = 0;
      o.progress = [&](uint64_t done, uint64_t total, int64_t) {
        CHECK(done > last_done);
        last_done = done;
        last_total = total;
      };
      const auto r = stream_tokenize(o);
      const BinFile train = read_bin(o.output + "_train.bin"),
                    val = read_bin(o.output + "_val.bin");
      CHECK(train.magic == 20240520);  // uint16 tokens: every vocabulary here is under 65536
      CHECK(train.version == 1);
      CHECK(val.magic == 20240520);
      CHECK(val.version == 1);
      Ids got = train.ids;
      got.insert(got.end(), val.ids.begin(), val.ids.end());
      CHECK(got == whole);
      CHECK(val.count == static_cast<int64_t>(whole.size() / 10));  // floor(10%)
      CHECK(r.train_tokens == train.count);
      CHECK(r.val_tokens == val.count);
      CHECK(r.bytes == text.size());
      CHECK(last_done == text.size());
      CHECK(last_total == text.size());
    }
  }
}

TEST_CASE("stream_tokenize names the file or the field it cannot take", "[tokenizer]") {
  TempDir dir;
  StreamTokenizeOptions o;
  o.output = (dir.path / "x").string();
  o.inputs = {"/nonexistent/a.txt"};
  CHECK_THROWS_WITH(stream_tokenize(o),
                    Contains("cannot open '/nonexistent/a.txt': No such file or directory"));
  o.inputs = {dir.file("ok.txt", "text"), dir.file("image.dat", std::string("text\0more", 9))};
  CHECK_THROWS_WITH(stream_tokenize(o), Contains("image.dat' looks binary, not text (a NUL byte "
                                                 "at offset 4)"));
  o.inputs = {dir.path.string()};
  CHECK_THROWS_WITH(stream_tokenize(o), Contains("is not a regular file"));
  o.inputs = {dir.file("ok.txt", "text")};
  o.threads = 0;
  CHECK_THROWS_WITH(stream_tokenize(o), Contains("threads is 0"));
  o.threads = 1;
  o.val_fraction = 0.7;
  CHECK_THROWS_WITH(stream_tokenize(o), Contains("val_fraction 0.7 is outside [0, 0.5]"));
  o.val_fraction = 0;
  o.inputs.clear();
  CHECK_THROWS_WITH(stream_tokenize(o), Contains("inputs is empty"));
  // An empty text: two files of headers, no tokens.
  o.inputs = {dir.file("empty.txt", "")};
  const auto r = stream_tokenize(o);
  CHECK(r.train_tokens == 0);
  CHECK(r.val_tokens == 0);
  CHECK(read_bin(o.output + "_train.bin").count == 0);
  CHECK(read_bin(o.output + "_val.bin").count == 0);
}

TEST_CASE("split_token_file moves the last tokens to a file of the same width", "[tokenizer]") {
  TempDir dir;
  const std::string all = (dir.path / "all.bin").string(), tail = (dir.path / "tail.bin").string();
  write_token_file(all, {5, 70000, 7, 128255, 9});  // 70000: uint32 tokens
  split_token_file(all, tail, 2);
  const BinFile head = read_bin(all), rest = read_bin(tail);
  CHECK(head.magic == 20240801);
  CHECK(head.version == 7);
  CHECK(head.ids == Ids{5, 70000, 7});
  CHECK(rest.magic == 20240801);
  CHECK(rest.version == 7);
  CHECK(rest.ids == Ids{128255, 9});
  split_token_file(all, tail, 0);
  CHECK(read_bin(all).ids == Ids{5, 70000, 7});
  CHECK(read_bin(tail).count == 0);
  CHECK_THROWS_WITH(split_token_file(all, tail, 4), Contains("at least 4 tokens"));
  CHECK_THROWS_WITH(split_token_file((dir.path / "none.bin").string(), tail, 1),
                    Contains("cannot open"));
  write_token_file(all, {1, 2, 3, 4, 5});
  fs::resize_file(all, 1024 + 2 * 3);  // the header says 5 tokens, 3 are there
  CHECK_THROWS_WITH(split_token_file(all, tail, 4),
                    Contains("is shorter than the 5 tokens its header counts"));
}
