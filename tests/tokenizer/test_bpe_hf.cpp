// Our ids against Hugging Face tokenizers' for tokenizers it trained itself
// (hf_tokenizer_reference.py; the ctest fixture tokenizer.hf_reference writes them): GPT-2
// layout with and without the prefix space, LLaMA-3 layout with ignore_merges, Qwen2 layout with
// NFC, on the built-in corpus and Unicode stress texts; and our Unicode classes and NFC against
// its regex engine's and normalizer's.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "tokenizer/nfc.h"
#include "tokenizer/unicode.h"
#include "vescale/tokenizer/bpe_tokenizer.h"

using vescale::tokenizer::BpeTokenizer;
using Ids = std::vector<int64_t>;

namespace {

const std::string kDir = HF_TOKENIZER_DIR;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Ids read_ids(const std::string& path) {
  const std::string raw = slurp(path);
  Ids ids(raw.size() / 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t v;
    std::memcpy(&v, raw.data() + 4 * i, 4);
    ids[i] = v;
  }
  return ids;
}

// The first position where the ids differ, for a readable failure.
size_t first_difference(const Ids& a, const Ids& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

std::string text_of(const std::string& name) {
  return name == "corpus" ? slurp(VESCALE_SOURCE_DIR "/data/corpus.txt")
                          : slurp(kDir + "/" + name + ".txt");
}

// The ids of `text` encoded in chunks cut at safe_cut every `buffer` bytes.
Ids streamed_ids(const BpeTokenizer& tok, std::string_view rest, size_t buffer) {
  Ids out;
  for (bool first = true; !rest.empty(); first = false) {
    size_t cut = 0;
    for (size_t take = buffer; cut == 0; take *= 2)  // no cut: read more, to the end at most
      cut = take >= rest.size() ? rest.size() : tok.safe_cut(rest.substr(0, take));
    tok.encode_chunk(rest.substr(0, cut), first, out);
    rest.remove_prefix(cut);
  }
  return out;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string nfc(const std::string& text) {
  std::string out;
  return vescale::tokenizer::nfc::normalize(text, out) ? out : text;
}

}  // namespace

TEST_CASE("ids equal HF tokenizers' on the corpus and the stress text", "[hf_tokenizer]") {
  for (const std::string layout : {"gpt2", "gpt2_prefix", "llama3"}) {
    const auto tok = BpeTokenizer::from_file(kDir + "/" + layout + ".json");
    for (const std::string name : {"corpus", "stress", "stress_special"}) {
      const std::string text = text_of(name == "corpus" ? "corpus" : "stress");
      const Ids ours = tok.encode(text, name == "stress_special");
      const Ids theirs = read_ids(kDir + "/" + layout + "." + name + ".ids");
      INFO(layout << " on " << name << ": " << ours.size() << " ids vs " << theirs.size()
                  << ", first difference at " << first_difference(ours, theirs));
      CHECK(ours == theirs);
      if (layout != "gpt2_prefix" && name != "stress_special") CHECK(tok.decode(ours) == text);
    }
  }
}

TEST_CASE("streamed chunks and threads give the same ids", "[hf_tokenizer]") {
  for (const std::string layout : {"gpt2", "gpt2_prefix", "llama3"}) {
    const auto tok = BpeTokenizer::from_file(kDir + "/" + layout + ".json");
    const std::string text = text_of("corpus") + text_of("stress");
    const Ids whole = tok.encode(text);
    Ids streamed;
    std::string_view rest = text;
    for (bool first = true; !rest.empty(); first = false) {
      size_t cut = rest.size() > 65536 ? tok.safe_cut(rest.substr(0, 65536)) : rest.size();
      REQUIRE(cut > 0);
      tok.encode_chunk(rest.substr(0, cut), first, streamed);
      rest.remove_prefix(cut);
    }
    INFO(layout << ": first difference at " << first_difference(streamed, whole));
    CHECK(streamed == whole);
    std::vector<Ids> got(3);
    std::vector<std::thread> threads;
    for (auto& g : got) threads.emplace_back([&] { g = tok.encode(text); });
    for (auto& t : threads) t.join();
    for (const auto& g : got) CHECK(g == whole);
  }
}

TEST_CASE("Unicode classes equal those of tokenizers' regex engine", "[hf_tokenizer]") {
  using namespace vescale::tokenizer::unicode;
  std::vector<CharClass> expect(0x110000, kOther);
  std::istringstream in(slurp(kDir + "/unicode_classes.txt"));
  std::string first, last, cls;
  while (in >> first >> last >> cls) {
    const CharClass c = cls == "L" ? kLetter : cls == "N" ? kNumber : kSpace;
    for (uint32_t cp = std::stoul(first, nullptr, 16); cp <= std::stoul(last, nullptr, 16); ++cp)
      expect[cp] = c;
  }
  size_t wrong = 0;
  uint32_t first_wrong = 0;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    if (class_of(cp) != expect[cp] && wrong++ == 0) first_wrong = cp;
  }
  INFO(wrong << " code points differ, the first U+" << std::hex << first_wrong
             << "; regenerate src/tokenizer/unicode_tables.cpp (scripts/gen-unicode-tables) for "
                "the Unicode version of the tokenizers package");
  CHECK(wrong == 0);
}

TEST_CASE("the Qwen2 layout (NFC, single digits, chat tokens) gives the ids of HF tokenizers",
          "[hf_tokenizer]") {
  const auto tok = BpeTokenizer::from_file(kDir + "/qwen2.json");
  for (const std::string name : {"corpus", "stress", "stress_special", "qwen"}) {
    const std::string file = name == "stress_special" ? "stress" : name;
    const std::string text = text_of(file);
    const Ids ours = tok.encode(text, name == "stress_special");
    const Ids theirs = read_ids(kDir + "/qwen2." + name + ".ids");
    INFO("qwen2 on " << name << ": " << ours.size() << " ids vs " << theirs.size()
                     << ", first difference at " << first_difference(ours, theirs));
    CHECK(ours == theirs);
    // Decode gives the text as NFC left it; the added token decodes as its content, "cafe\u0301",
    // wherever "caf\u00e9" matched it (so on the qwen text, equal up to NFC).
    const std::string back = tok.decode(ours);
    CHECK((file == "qwen" ? nfc(back) : back) == slurp(kDir + "/qwen2." + file + ".nfc"));
  }
  // A few ids by hand: the added token "cafe\u0301" (normalized) matches its NFC, whether the
  // text spells it composed or as e + U+0301; <|im_start|> is one id; 12345 is five pieces.
  const auto cafe = tok.token_to_id("cafe\u0301");
  REQUIRE(cafe.has_value());
  CHECK(tok.encode("cafe\u0301") == Ids{*cafe});
  CHECK(tok.encode("caf\u00e9") == Ids{*cafe});
  CHECK(tok.encode("<|im_start|>") == Ids{*tok.token_to_id("<|im_start|>")});
  CHECK(tok.encode("12345").size() == 5);
  // Streamed with small buffers (NFC and the added tokens near cuts) and on threads.
  const std::string text = text_of("corpus") + text_of("stress") + text_of("qwen");
  const Ids whole = tok.encode(text);
  for (size_t buffer : {256, 65536}) {
    const Ids streamed = streamed_ids(tok, text, buffer);
    INFO("buffer " << buffer << ": first difference at " << first_difference(streamed, whole));
    CHECK(streamed == whole);
  }
  std::vector<Ids> got(3);
  std::vector<std::thread> threads;
  for (auto& g : got) threads.emplace_back([&] { g = tok.encode(text); });
  for (auto& t : threads) t.join();
  for (const auto& g : got) CHECK(g == whole);
}

TEST_CASE("NFC equals that of HF tokenizers on every code point and on mark sequences",
          "[hf_tokenizer]") {
  const auto cases = nlohmann::json::parse(slurp(kDir + "/nfc.json"));
  std::vector<std::string> expect(0x110000);
  for (const auto& c : cases["changed"]) expect[c[0].get<uint32_t>()] = c[1].get<std::string>();
  size_t wrong = 0, changed = 0;
  uint32_t first_wrong = 0;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xE000) continue;
    const std::string in = utf8(cp);
    const std::string want = expect[cp].empty() ? in : expect[cp];
    changed += want != in;
    if (nfc(in) != want && wrong++ == 0) first_wrong = cp;
  }
  INFO(wrong << " code points differ, the first U+" << std::hex << first_wrong
             << "; regenerate src/tokenizer/nfc_tables.cpp (scripts/gen-nfc-tables) for the "
                "Unicode version of the tokenizers package");
  CHECK(wrong == 0);
  CHECK(changed == cases["changed"].size());
  CHECK(changed > 1000);  // singletons, exclusions, non-starter decompositions
  size_t seq_wrong = 0, seq_changed = 0;
  std::string first_seq;
  for (const auto& c : cases["sequences"]) {
    const auto in = c[0].get<std::string>(), want = c[1].get<std::string>();
    seq_changed += want != in;
    if (nfc(in) != want && seq_wrong++ == 0) first_seq = in;
  }
  INFO(seq_wrong << " sequences differ, the first " << nlohmann::json(first_seq).dump());
  CHECK(seq_wrong == 0);
  CHECK(seq_changed > 10000);
}
