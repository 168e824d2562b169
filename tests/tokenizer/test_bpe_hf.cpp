// Our ids against Hugging Face tokenizers' for tokenizers it trained itself
// (hf_tokenizer_reference.py; the ctest fixture tokenizer.hf_reference writes them): GPT-2
// layout with and without the prefix space, LLaMA-3 layout with ignore_merges, on the built-in
// corpus and a Unicode stress text; and our Unicode classes against its regex engine's.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

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
                          : slurp(kDir + "/stress.txt");
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
