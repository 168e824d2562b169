// libFuzzer target for the BPE tokenizer: any bytes, read as a tokenizer.json, must load or
// throw vescale::Error; encoded by four small tokenizers (GPT-2 layout with and without the
// prefix space, LLaMA-3 layout, Qwen2 layout with NFC), they must decode back to themselves
// (for Qwen2's, to the NFC of each piece between its non-normalized added tokens; not checked
// where a prefix space is added) and give the same ids
// when streamed in chunks cut at safe_cut; and NFC of NFC must change nothing. A crash, a
// sanitizer report, an escaping exception or a broken round trip is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tiny_tokenizer.h"
#include "tokenizer/nfc.h"
#include "vescale/common/check.h"
#include "vescale/tokenizer/bpe_tokenizer.h"

namespace {

using vescale::testing::Layout;
using vescale::tokenizer::BpeTokenizer;

const BpeTokenizer& tokenizer(int k) {
  static const auto all = [] {
    std::vector<std::unique_ptr<BpeTokenizer>> t;
    for (auto layout : {Layout::kGpt2, Layout::kGpt2Prefix, Layout::kLlama3, Layout::kQwen2}) {
      auto j = vescale::testing::tiny_tokenizer(layout,
                                                {{" ", "t"},
                                                 {"h", "e"},
                                                 {" t", "he"},
                                                 {"\xE4", "\xB8"},
                                                 {"a", "a"},
                                                 {"aa", "aa"},
                                                 {" ", " "},
                                                 {"\n", "\n"},
                                                 {"'", "s"}},
                                                layout == Layout::kLlama3);
      vescale::testing::add_token(j, "<s>", true, false);
      vescale::testing::add_token(j, "a\nb", false, true);
      t.push_back(std::make_unique<BpeTokenizer>(BpeTokenizer::from_json(j.dump(), "fuzz")));
    }
    return t;
  }();
  return *all[k];
}

// What Qwen2's layout decodes back to: HF splits out the non-normalized added token "<s>" first
// and normalizes each piece between alone, so a combining mark after "<s>" does not compose
// with its '>' (U+0338 would make it U+226F).
std::string nfc_between_added(const std::string& x) {
  std::string out;
  for (size_t start = 0;;) {
    const size_t at = x.find("<s>", start);
    const std::string piece = x.substr(start, at == std::string::npos ? at : at - start);
    std::string piece_nfc = piece;
    vescale::tokenizer::nfc::normalize(piece, piece_nfc);
    out += piece_nfc;
    if (at == std::string::npos) return out;
    out += "<s>";
    start = at + 3;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string x(reinterpret_cast<const char*>(data), size);
  try {
    (void)BpeTokenizer::from_json(x, "fuzz.json");
  } catch (const vescale::Error&) {
  }
  std::string nfc_x = x, again;
  vescale::tokenizer::nfc::normalize(x, nfc_x);
  if (vescale::tokenizer::nfc::normalize(nfc_x, again) && again != nfc_x) std::abort();
  for (int k = 0; k < 4; ++k) {
    const BpeTokenizer& tok = tokenizer(k);
    const std::vector<int64_t> ids = tok.encode(x);
    if (k != 1 && tok.decode(ids) != (k == 3 ? nfc_between_added(x) : x)) std::abort();
    std::vector<int64_t> streamed;
    std::string_view rest = x;
    for (bool first = true; !rest.empty(); first = false) {
      size_t cut = rest.size() > 17 ? tok.safe_cut(rest.substr(0, 17)) : 0;
      if (cut == 0) cut = rest.size() > 64 ? 0 : rest.size();
      if (cut == 0) cut = tok.safe_cut(rest) ? tok.safe_cut(rest) : rest.size();
      tok.encode_chunk(rest.substr(0, cut), first, streamed);
      rest.remove_prefix(cut);
    }
    if (streamed != ids) std::abort();
  }
  return 0;
}
