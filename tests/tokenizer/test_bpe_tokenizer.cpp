// The byte-level BPE tokenizer on hand-made tokenizer.json files: merges by rank, ignore_merges,
// added tokens, the prefix space, the template, the pieces of the three patterns, the NFC
// normalizer, errors that name the field, invalid UTF-8 round trips, streaming cuts and threads.
// (Against HF tokenizers itself: test_bpe_hf.cpp.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <thread>

#include "tiny_tokenizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "vescale/common/check.h"
#include "vescale/tokenizer/bpe_tokenizer.h"

using namespace vescale::tokenizer;
using Catch::Matchers::Contains;
using vescale::testing::add_token;
using vescale::testing::Layout;
using vescale::testing::tiny_tokenizer;
using Ids = std::vector<int64_t>;

namespace {

BpeTokenizer load(const nlohmann::json& j) { return BpeTokenizer::from_json(j.dump(), "<test>"); }

int64_t b(char c) { return static_cast<unsigned char>(c); }  // a byte's own token

std::vector<std::string> pieces(SplitPattern p, const std::string& text) {
  std::vector<std::string> out;
  const auto* t = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t pos = 0; pos < text.size();) {
    const size_t e = next_piece(p, t, text.size(), pos);
    out.push_back(text.substr(pos, e - pos));
    pos = e;
  }
  return out;
}

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

}  // namespace

TEST_CASE("BPE merges the lowest-ranked pair first, leftmost on ties", "[tokenizer]") {
  // ids: bytes 0..255, then one per merge in order.
  auto bc_first = load(tiny_tokenizer(Layout::kGpt2, {{"b", "c"}, {"a", "b"}}));
  CHECK(bc_first.encode("abc") == Ids{b('a'), 256});  // "bc" (rank 0) beats "ab" (rank 1)
  auto ab_first = load(tiny_tokenizer(Layout::kGpt2, {{"a", "b"}, {"b", "c"}}));
  CHECK(ab_first.encode("abc") == Ids{256, b('c')});
  // Merges of merges: a b -> ab, ab c -> abc.
  auto chain = load(tiny_tokenizer(Layout::kGpt2, {{"a", "b"}, {"ab", "c"}}));
  CHECK(chain.encode("abcab") == Ids{257, 256});
  // Ties go left: "aaa" with "a a" is [aa, a]; "aaaa" is [aa, aa] and then "aa aa" if ranked.
  auto aa = load(tiny_tokenizer(Layout::kGpt2, {{"a", "a"}, {"aa", "aa"}}));
  CHECK(aa.encode("aaa") == Ids{256, b('a')});
  CHECK(aa.encode("aaaa") == Ids{257});
  CHECK(aa.encode("aaaaa") == Ids{257, b('a')});
  // A long piece goes through the heap path and must agree with the scan: 1000 a's.
  CHECK(aa.encode(std::string(1000, 'a')) == Ids(250, 257));
  CHECK(aa.encode(std::string(1001, 'a')).back() == b('a'));
  // Merges never cross pieces: " a" and "a" are separate pre-tokens in "a a".
  auto sp = load(tiny_tokenizer(Layout::kGpt2, {{" ", "a"}, {"a", " "}}));
  CHECK(sp.encode("a a") == Ids{b('a'), 256});
}

TEST_CASE("BPE equals a naive merge loop on random merges, short and long pieces", "[tokenizer]") {
  // The reference: repeatedly merge the lowest-ranked adjacent pair, leftmost on ties.
  std::mt19937 rng(11);
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::string> tokens = {"a", "b", "c"};
  for (int i = 0; i < 60; ++i) {
    const auto& l = tokens[rng() % tokens.size()];
    const auto& r = tokens[rng() % tokens.size()];
    if (std::find(tokens.begin(), tokens.end(), l + r) != tokens.end()) continue;
    merges.emplace_back(l, r);
    tokens.push_back(l + r);
  }
  auto tok = load(tiny_tokenizer(Layout::kGpt2, merges));
  auto naive = [&](const std::string& word) {
    std::vector<std::string> parts;
    for (char c : word) parts.emplace_back(1, c);
    for (;;) {
      size_t best = parts.size(), best_rank = merges.size();
      for (size_t i = 0; i + 1 < parts.size(); ++i)
        for (size_t r = 0; r < best_rank; ++r)
          if (merges[r].first == parts[i] && merges[r].second == parts[i + 1]) {
            best = i;
            best_rank = r;
            break;
          }
      if (best == parts.size()) break;
      parts[best] += parts[best + 1];
      parts.erase(parts.begin() + best + 1);
    }
    Ids ids;
    for (const auto& p : parts) ids.push_back(*tok.token_to_id(p));
    return ids;
  };
  for (size_t len : {1, 2, 5, 17, 100, 128, 129, 300, 1000}) {
    for (int trial = 0; trial < 5; ++trial) {
      std::string word;
      for (size_t i = 0; i < len; ++i) word += "abc"[rng() % 3];
      INFO(word);
      CHECK(tok.encode(word) == naive(word));  // one piece: letters only
    }
  }
}

TEST_CASE("merges in the string form read like the array form", "[tokenizer]") {
  auto j = tiny_tokenizer(Layout::kGpt2, {{"a", "b"}, {" ", "ab"}});
  auto strings = j;
  strings["model"]["merges"] = {"a b", "Ġ ab"};
  CHECK(load(strings).encode("ab ab") == load(j).encode("ab ab"));
  CHECK(load(strings).encode("ab ab") == Ids{256, 257});
}

TEST_CASE("ignore_merges emits a piece that is a token whole", "[tokenizer]") {
  // "abc" is in the vocabulary but no merge reaches it from "ab" + "c".
  auto j = tiny_tokenizer(Layout::kLlama3, {{"a", "b"}});
  j["model"]["vocab"]["abc"] = 300;
  CHECK(load(j).encode("abc") == Ids{256, b('c')});
  j["model"]["ignore_merges"] = true;
  CHECK(load(j).encode("abc") == Ids{300});
  CHECK(load(j).encode("abcd") == Ids{256, b('c'), b('d')});  // "abcd" is no token: merges
  CHECK(load(j).decode({300}) == "abc");
}

TEST_CASE("added tokens split the text first, leftmost-longest", "[tokenizer]") {
  auto j = tiny_tokenizer(Layout::kGpt2, {{"x", "y"}});
  const int64_t s = add_token(j, "<s>", true, false);
  const int64_t xy = add_token(j, "xy", false, true);  // also a merge result; the added id wins
  const int64_t ab = add_token(j, "ab", false, true);
  const int64_t abc = add_token(j, "abc", false, true);
  auto tok = load(j);
  CHECK(tok.encode("q<s>xyz") == Ids{b('q'), s, xy, b('z')});
  CHECK(tok.encode("abcd ab") == Ids{abc, b('d'), b(' '), ab});  // longest at the leftmost start
  CHECK(tok.encode("<s><s>") == Ids{s, s});
  CHECK(tok.token_to_id("<s>") == s);
  CHECK(tok.vocab_size() == abc + 1);
  CHECK(tok.decode({b('q'), s, xy}) == "q<s>xy");
  CHECK(tok.decode({b('q'), s, xy}, /*skip_special_tokens=*/true) == "qxy");
  // The non-normalized tokens are matched before the normalized ones (HF's two passes):
  // "q<" (normalized) would start earlier than "<s>" (not), but "<s>" is taken first.
  auto k = tiny_tokenizer(Layout::kGpt2, {});
  const int64_t s2 = add_token(k, "<s>", true, false);
  add_token(k, "q<", false, true);
  CHECK(load(k).encode("q<s>") == Ids{b('q'), s2});
}

TEST_CASE("add_prefix_space puts a space before each text segment", "[tokenizer]") {
  auto j = tiny_tokenizer(Layout::kGpt2Prefix, {{" ", "a"}});
  const int64_t s = add_token(j, "<s>", true, false);
  auto tok = load(j);
  CHECK(tok.encode("a") == Ids{256});
  CHECK(tok.encode(" a") == Ids{256});  // already there: no second space
  CHECK(tok.encode("a<s>a") == Ids{256, s, 256});
  CHECK(tok.encode("<s><s>") == Ids{s, s});  // empty segments take nothing
  // A later chunk of a stream takes no space.
  Ids out;
  tok.encode_chunk("a", /*first=*/false, out);
  CHECK(out == Ids{b('a')});
}

TEST_CASE("add_special_tokens applies the TemplateProcessing single template", "[tokenizer]") {
  auto j = tiny_tokenizer(Layout::kLlama3, {});
  const int64_t bos = add_token(j, "<|begin_of_text|>", true, false);
  const int64_t eos = add_token(j, "<|end_of_text|>", true, false);
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}},
        {{"type", "TemplateProcessing"},
         {"single",
          {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
           {{"SpecialToken", {{"id", "<|end_of_text|>"}, {"type_id", 0}}}}}},
         {"special_tokens",
          {{"<|begin_of_text|>",
            {{"id", "<|begin_of_text|>"}, {"ids", {bos}}, {"tokens", {"<|begin_of_text|>"}}}},
           {"<|end_of_text|>",
            {{"id", "<|end_of_text|>"}, {"ids", {eos}}, {"tokens", {"<|end_of_text|>"}}}}}}}}}};
  auto tok = load(j);
  CHECK(tok.encode("hi", true) == Ids{bos, b('h'), b('i'), eos});
  CHECK(tok.encode("hi") == Ids{b('h'), b('i')});
  CHECK(tok.decode(tok.encode("hi", true), true) == "hi");
}

TEST_CASE("the GPT-2 pattern cuts pieces as HF tokenizers does", "[tokenizer]") {
  // Expected pieces: tokenizers 0.23's Split(GPT-2 regex, Isolated).pre_tokenize_str.
  using V = std::vector<std::string>;
  const auto p = SplitPattern::kGpt2;
  CHECK(pieces(p, "Hello world's  end\n\n") == V{"Hello", " world", "'s", " ", " end", "\n\n"});
  CHECK(pieces(p, "DON'T we'LL I'm 12345 ab\r\n\r\nx") ==
        V{"DON", "'", "T", " we", "'", "LL", " I", "'m", " 12345", " ab", "\r\n\r", "\n", "x"});
  CHECK(pieces(p, "  \tx\t y (hi) !!\n?") ==
        V{"  ", "\t", "x", "\t", " y", " (", "hi", ")", " !!", "\n", "?"});
  CHECK(pieces(p, "it'\xC5\xBF 'S") == V{"it", "'", "\xC5\xBF", " '", "S"});
  CHECK(pieces(p, "a  \n b") == V{"a", "  \n", " b"});
  CHECK(pieces(p, "中文 é1 ½x") == V{"中文", " é", "1", " ½", "x"});
  CHECK(pieces(p, "\u3000a \u00a0b  ") == V{"\u3000", "a", " ", "\u00a0", "b", "  "});
}

TEST_CASE("the LLaMA-3 pattern cuts pieces as HF tokenizers does", "[tokenizer]") {
  using V = std::vector<std::string>;
  const auto p = SplitPattern::kLlama3;
  CHECK(pieces(p, "Hello world's  end\n\n") == V{"Hello", " world", "'s", " ", " end", "\n\n"});
  CHECK(pieces(p, "DON'T we'LL I'm 12345 ab\r\n\r\nx") ==
        V{"DON", "'T", " we", "'LL", " I", "'m", " ", "123", "45", " ab", "\r\n\r\n", "x"});
  CHECK(pieces(p, "  \tx\t y (hi) !!\n?") ==
        V{"  ", "\tx", "\t", " y", " (", "hi", ")", " !!\n", "?"});
  CHECK(pieces(p, "it'\xC5\xBF 'S") == V{"it", "'\xC5\xBF", " '", "S"});  // 'ſ folds to 's
  CHECK(pieces(p, "a  \n b") == V{"a", "  \n", " b"});
  CHECK(pieces(p, "中文 é1 ½x") == V{"中文", " é", "1", " ", "½", "x"});
  CHECK(pieces(p, "\u3000a \u00a0b  ") == V{"\u3000a", " ", "\u00a0b", "  "});
}

TEST_CASE("the Qwen2 pattern cuts pieces as HF tokenizers does", "[tokenizer]") {
  // LLaMA-3's pattern with \p{N} for \p{N}{1,3}: each digit its own piece.
  using V = std::vector<std::string>;
  const auto p = SplitPattern::kQwen2;
  CHECK(pieces(p, "Hello world's  end\n\n") == V{"Hello", " world", "'s", " ", " end", "\n\n"});
  CHECK(pieces(p, "DON'T we'LL I'm 12345 ab\r\n\r\nx") == V{"DON", "'T", " we", "'LL", " I", "'m",
                                                            " ", "1", "2", "3", "4", "5", " ab",
                                                            "\r\n\r\n", "x"});
  CHECK(pieces(p, "  \tx\t y (hi) !!\n?") ==
        V{"  ", "\tx", "\t", " y", " (", "hi", ")", " !!\n", "?"});
  CHECK(pieces(p, "it'\xC5\xBF 'S") == V{"it", "'\xC5\xBF", " '", "S"});
  CHECK(pieces(p, "中文 é1 ½x") == V{"中文", " é", "1", " ", "½", "x"});
  CHECK(pieces(p, "x1y22 3.14 ١٢٣ Ⅻ²") ==
        V{"x", "1", "y", "2", "2", " ", "3", ".", "1", "4", " ", "١", "٢", "٣", " ", "Ⅻ", "²"});
  CHECK(pattern_of_regex(kQwen2Regex) == SplitPattern::kQwen2);
}

TEST_CASE("the NFC normalizer runs between the non-normalized added tokens", "[tokenizer]") {
  auto j = tiny_tokenizer(Layout::kQwen2, {});
  const int64_t raw = add_token(j, "x\u0301", true, false);    // matched in the text as given
  const int64_t norm = add_token(j, "e\u0301!", false, true);  // matched as its NFC, "\u00e9!"
  auto tok = load(j);
  const Ids e_acute = {0xC3, 0xA9};  // U+00E9's two bytes
  CHECK(tok.encode("e\u0301") == e_acute);
  CHECK(tok.encode("\u00e9") == e_acute);
  CHECK(tok.encode("x\u0301") == Ids{raw});  // NFC would make it one character, U+0078 U+0301
  CHECK(tok.encode("\u00e9!") == Ids{norm});
  CHECK(tok.encode("e\u0301!") == Ids{norm});
  // Marks in canonical order (dot below, class 220, before circumflex, 230), then composed:
  // a + U+0323 + U+0302 is U+1EAD, whichever order the marks come in.
  CHECK(tok.decode(tok.encode("a\u0302\u0323")) == "\u1ead");
  CHECK(tok.decode(tok.encode("a\u0323\u0302")) == "\u1ead");
  CHECK(tok.decode(tok.encode("\u1100\u1161\u11a8")) == "\uac01");  // Hangul L V T
  CHECK(tok.decode(tok.encode("\u212b")) == "\u00c5");              // a singleton: Angstrom sign
  // Invalid UTF-8 passes through.
  CHECK(tok.decode(tok.encode("\xFF"
                              "e\u0301\xC3")) == "\xFF\u00e9\xC3");
  // A Sequence of NFC is NFC; another normalizer is an error naming where it is.
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  CHECK(load(j).encode("e\u0301") == e_acute);
  j["normalizer"]["normalizers"].push_back({{"type", "Lowercase"}});
  CHECK_THROWS_WITH(load(j),
                    Contains("normalizer.normalizers[1] type 'Lowercase' is not supported"));
}

TEST_CASE("an invalid UTF-8 byte is a character that is no letter, number or space",
          "[tokenizer]") {
  using V = std::vector<std::string>;
  // LLaMA-3: one non-letter before letters joins them; GPT-2: a run of "other" characters.
  CHECK(pieces(SplitPattern::kLlama3,
               "\xFF"
               "abc") == V{"\xFF"
                           "abc"});
  CHECK(pieces(SplitPattern::kLlama3, "x\xE4\xB8y") == V{"x", "\xE4\xB8", "y"});  // truncated 中
  CHECK(pieces(SplitPattern::kGpt2, " \xFF\xFE!a") == V{" \xFF\xFE!", "a"});
  CHECK(pieces(SplitPattern::kGpt2,
               "\xED\xA0\x80"
               "1") == V{"\xED\xA0\x80", "1"});  // a surrogate
  CHECK(pieces(SplitPattern::kGpt2,
               "\xC0\xAF"
               "a") == V{"\xC0\xAF", "a"});  // overlong '/'
  // ...and BPE sees the bytes: with ignore_merges, the piece "\xFF" "abc" is one token.
  auto j = tiny_tokenizer(Layout::kLlama3, {}, /*ignore_merges=*/true);
  j["model"]["vocab"]
   [bytes_to_byte_level("\xFF"
                        "abc")] = 256;
  CHECK(load(j).encode("\xFF"
                       "abc") == Ids{256});
}

TEST_CASE("decode(encode(x)) == x for any bytes, invalid UTF-8 included", "[tokenizer]") {
  std::mt19937 rng(7);
  for (auto layout : {Layout::kGpt2, Layout::kLlama3}) {
    auto tok =
        load(tiny_tokenizer(layout, {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"\xE4", "\xB8"}}));
    for (const std::string& x :
         {std::string("\xFF\xFE\xFD"), std::string("\xE4\xB8"), std::string("\xF4\x90\x80\x80"),
          std::string("a\0b", 3), std::string("\xC3\x28 the \xA0\xA1"),
          std::string(" the\r\n\xE2\x82")})
      CHECK(tok.decode(tok.encode(x)) == x);
    for (int i = 0; i < 200; ++i) {
      const std::string x = random_bytes(rng, rng() % 64);
      REQUIRE(tok.decode(tok.encode(x)) == x);
    }
    std::string all(256, '\0');
    for (int c = 0; c < 256; ++c) all[c] = static_cast<char>(c);
    CHECK(tok.decode(tok.encode(all)) == all);
  }
}

TEST_CASE("errors name the file's field and what is supported", "[tokenizer]") {
  auto fails = [](const nlohmann::json& j, const std::string& what) {
    CHECK_THROWS_WITH(BpeTokenizer::from_json(j.dump(), "tok.json"),
                      Contains("tok.json") && Contains(what));
  };
  const auto base = tiny_tokenizer(Layout::kGpt2, {{"a", "b"}});
  auto j = base;
  j["model"]["merges"].push_back({"a", "zzz"});
  fails(j, "model.merges[1]");
  j = base;
  j["model"]["merges"] = {"a b c"};
  fails(j, "model.merges[0]");
  j = base;
  j["model"]["type"] = "WordPiece";
  fails(j, "model.type 'WordPiece'");
  j = base;
  j["model"]["dropout"] = 0.1;
  fails(j, "model.dropout");
  j = base;
  j["normalizer"] = {{"type", "NFKC"}};  // NFC is supported (Qwen2's); NFKC is not
  fails(j, "normalizer");
  j = base;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  fails(j, "pre_tokenizer type 'Whitespace'");
  j = tiny_tokenizer(Layout::kLlama3, {});
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  fails(j, "pre_tokenizer.pretokenizers[0].pattern.Regex");
  j = base;
  add_token(j, "<x>", true, false);
  j["added_tokens"][0]["lstrip"] = true;
  fails(j, "added_tokens[0] ('<x>'): lstrip");
  j = base;
  j["decoder"] = {{"type", "WordPiece"}};
  fails(j, "decoder type 'WordPiece'");
  j = base;
  j["post_processor"] = {{"type", "BertProcessing"}};
  fails(j, "post_processor type 'BertProcessing'");
  CHECK_THROWS_WITH(BpeTokenizer::from_json("{\"model\": ", "tok.json"),
                    Contains("not valid JSON"));
  CHECK_THROWS_WITH(BpeTokenizer::from_json("[1e99999]", "tok.json"), Contains("not valid JSON"));
  j = base;
  j["model"]["vocab"]["zz"] = 1 << 30;
  fails(j, "ids must be (nearly) dense");
  CHECK_THROWS_WITH(BpeTokenizer::from_file("/nonexistent/tokenizer.json"),
                    Contains("cannot open '/nonexistent/tokenizer.json'"));
  auto tok = load(base);
  CHECK_THROWS_WITH(tok.decode({1, 99999}), Contains("id 99999 at position 1"));
  CHECK_THROWS_AS(tok.decode({-1}), vescale::Error);
}

TEST_CASE("streaming: chunks cut at safe_cut encode to the whole text's ids", "[tokenizer]") {
  std::mt19937 rng(3);
  const char* words[] = {"the", " ", "  ",   "\n", "\n\n", "DON'T", "'s", "12345", " 7",
                         "\t",  "é", "中文", "!!", "\r\n", "<s>",   "a",  "\xFF",  "  \n "};
  std::string text;
  for (int i = 0; i < 20000; ++i) text += words[rng() % (sizeof(words) / sizeof(words[0]))];
  for (auto layout : {Layout::kGpt2, Layout::kGpt2Prefix, Layout::kLlama3}) {
    auto j =
        tiny_tokenizer(layout, {{" ", " "}, {"\n", "\n"}, {"t", "h"}, {"th", "e"}, {" ", "the"}});
    add_token(j, "<s>", true, false);
    add_token(j, "e<s", false, true);
    auto tok = load(j);
    const Ids whole = tok.encode(text);
    for (size_t buffer : {64, 1000, 4096}) {
      Ids streamed;
      std::string pending;
      size_t read = 0;
      bool first = true;
      int chunks = 0;
      while (read < text.size() || !pending.empty()) {
        const size_t take = std::min(buffer, text.size() - read);
        pending.append(text, read, take);
        read += take;
        size_t cut = read == text.size() ? pending.size() : tok.safe_cut(pending);
        if (cut == 0) continue;  // no safe place yet: read more
        tok.encode_chunk(std::string_view(pending).substr(0, cut), first, streamed);
        first = false;
        pending.erase(0, cut);
        ++chunks;
      }
      CHECK(chunks > 10);
      CHECK(streamed == whole);
    }
  }
  // Nothing to cut at: 0.
  auto tok = load(tiny_tokenizer(Layout::kGpt2, {}));
  CHECK(tok.safe_cut(std::string(100, ' ')) == 0);
  CHECK(tok.safe_cut("ab") == 0);
}

TEST_CASE("streaming under NFC: no cut splits what normalization joins", "[tokenizer]") {
  // "e\u0301\n|x" is a cut in the raw text, but after NFC the normalized added token "\u00e9\nx"
  // spans it: cuts near non-ASCII text are not taken while normalized added tokens exist.
  std::mt19937 rng(5);
  const char* words[] = {"the", " ",    "\n",         "e\u0301\nx", "a\u0302\u0323", "12345",
                         "\t",  "中文", "<|im_end|>", "DON'T",      "\u212b",        " x"};
  std::string text;
  for (int i = 0; i < 20000; ++i) text += words[rng() % (sizeof(words) / sizeof(words[0]))];
  auto j = tiny_tokenizer(Layout::kQwen2, {{" ", " "}, {"t", "h"}, {"th", "e"}});
  add_token(j, "<|im_end|>", true, false);
  const int64_t joined = add_token(j, "\u00e9\nx", false, true);
  auto tok = load(j);
  const Ids whole = tok.encode(text);
  CHECK(std::count(whole.begin(), whole.end(), joined) > 100);
  for (size_t buffer : {64, 1000}) {
    Ids streamed;
    std::string_view rest = text;
    int chunks = 0;
    for (bool first = true; !rest.empty(); first = false, ++chunks) {
      size_t cut = 0;
      for (size_t take = buffer; cut == 0; take *= 2)
        cut = take >= rest.size() ? rest.size() : tok.safe_cut(rest.substr(0, take));
      tok.encode_chunk(rest.substr(0, cut), first, streamed);
      rest.remove_prefix(cut);
    }
    CHECK(chunks > 10);
    CHECK(streamed == whole);
  }
}

TEST_CASE("several threads encode with one tokenizer", "[tokenizer]") {
  auto tok = load(tiny_tokenizer(Layout::kLlama3, {{"t", "h"}, {"th", "e"}, {" ", "the"}}));
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "the cat's " + std::to_string(i) + " hat\n";
  const Ids expect = tok.encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 3; ++r) got[t] = tok.encode(text);
    });
  for (auto& th : threads) th.join();
  for (const auto& g : got) CHECK(g == expect);
}
