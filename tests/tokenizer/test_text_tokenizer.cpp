// The tokenizer a run's text goes through (TextTokenizer): bytes when no tokenizer.json is
// named, else the BPE tokenizer with its special tokens. Expected ids of the shipped vocabulary:
// tokenizers 0.23's Tokenizer.from_file("data/tokenizer_bpe2048.json").encode(...).ids.
#include <catch2/catch.hpp>

#include "vescale/common/check.h"
#include "vescale/tokenizer/byte_tokenizer.h"
#include "vescale/tokenizer/text_tokenizer.h"

using Catch::Matchers::Contains;
using vescale::tokenizer::ByteTokenizer;
using vescale::tokenizer::TextTokenizer;
using Ids = std::vector<int64_t>;

TEST_CASE("the byte tokenizer: one token per byte, 256 of them", "[tokenizer]") {
  CHECK(ByteTokenizer::encode("h\xC3\xA9\n") == Ids{104, 0xC3, 0xA9, 10});
  CHECK(ByteTokenizer::decode({104, 0xC3, 0xA9, 10}) == "h\xC3\xA9\n");
  CHECK_THROWS_WITH(ByteTokenizer::decode({104, 256}),
                    Contains("token 256 at position 1 is not a byte"));
  const TextTokenizer bytes;
  CHECK(bytes.name() == "bytes");
  CHECK(bytes.vocab_size() == 256);
  CHECK(bytes.encode("hi") == Ids{104, 105});
  CHECK(bytes.decode({104, 105}) == "hi");
  CHECK(bytes.stop_ids().empty());
}

TEST_CASE("TextTokenizer over a tokenizer.json: its ids, its end-of-text token", "[tokenizer]") {
  const std::string path = VESCALE_SOURCE_DIR "/data/tokenizer_bpe2048.json";
  const TextTokenizer tok(path);
  CHECK(tok.name() == path);
  CHECK(tok.vocab_size() == 2048);
  CHECK(tok.encode("In the beginning") == Ids{41, 78, 259, 872, 266, 1620});
  CHECK(tok.stop_ids() == Ids{0});            // <|endoftext|>
  CHECK(tok.decode({0, 41, 78, 0}) == "In");  // special tokens left out
  CHECK_THROWS_WITH(tok.decode({41, 5000}), Contains("id 5000 at position 1"));
  CHECK_THROWS_WITH(TextTokenizer("/nonexistent/tokenizer.json"),
                    Contains("cannot open '/nonexistent/tokenizer.json'"));
}
