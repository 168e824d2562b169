// What is supported is what GPT-2, LLaMA-3 and Qwen2 style tokenizers use: no normalizer, or NFC
// (Qwen2's); a ByteLevel pre-tokenizer (with its GPT-2 regex) or a Split on the GPT-2 / LLaMA-3 /
// Qwen2 regex then ByteLevel without regex; a BPE model; ByteLevel and TemplateProcessing
// post-processors; the ByteLevel decoder. Anything else is an error naming it, rather than ids that
// differ from HF's.
#include "tokenizer/tokenizer_json.h"

#include <nlohmann/json.hpp>

#include "vescale/common/check.h"

namespace vescale::tokenizer {

namespace {

using json = nlohmann::json;

struct Reader {
  const std::string& source;

  const json* get(const json& obj, const char* key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  bool boolean(const json& obj, const std::string& path, const char* key, bool dflt) const {
    const json* v = get(obj, key);
    if (!v) return dflt;
    VESCALE_CHECK(v->is_boolean(), source, ": ", path, ".", key, " must be true or false, not ",
                  v->dump());
    return v->get<bool>();
  }
  std::string string(const json& obj, const std::string& path, const char* key) const {
    const json* v = get(obj, key);
    VESCALE_CHECK(v && v->is_string(), source, ": ", path, ".", key, " must be a string",
                  v ? ", not " + v->dump() : " (missing)");
    return v->get<std::string>();
  }
  const json& object(const json& obj, const std::string& path, const char* key) const {
    const json* v = get(obj, key);
    VESCALE_CHECK(v && v->is_object(), source, ": ", path.empty() ? "" : path + ".", key,
                  " must be an object", v ? ", not " + v->dump().substr(0, 80) : " (missing)");
    return *v;
  }
  std::string type(const json& obj, const std::string& path) const {
    VESCALE_CHECK(obj.is_object(), source, ": ", path, " must be an object, not ",
                  obj.dump().substr(0, 80));
    return string(obj, path, "type");
  }
};

// ByteLevel as a pre-tokenizer: its regex is GPT-2's; add_prefix_space puts a space first.
void read_byte_level(const Reader& r, const json& pt, const std::string& path, bool after_split,
                     TokenizerSpec& spec) {
  const bool use_regex = r.boolean(pt, path, "use_regex", true);
  spec.add_prefix_space = r.boolean(pt, path, "add_prefix_space", true);
  if (after_split) {
    VESCALE_CHECK(!use_regex, r.source, ": ", path,
                  ".use_regex is true after a Split; only ByteLevel(use_regex: false) may follow "
                  "a Split (the LLaMA-3 and Qwen2 layout)");
    VESCALE_CHECK(!spec.add_prefix_space, r.source, ": ", path,
                  ".add_prefix_space is true after a Split, which would put a space before every "
                  "piece; this is not supported (set it to false)");
  } else {
    spec.pattern = use_regex ? SplitPattern::kGpt2 : SplitPattern::kNone;
  }
}

void read_split(const Reader& r, const json& pt, const std::string& path, TokenizerSpec& spec) {
  const json& pattern = r.object(pt, path, "pattern");
  const json* regex = r.get(pattern, "Regex");
  VESCALE_CHECK(regex && regex->is_string(), r.source, ": ", path,
                ".pattern must be {\"Regex\": ...} with the GPT-2, LLaMA-3 or Qwen2 regex, not ",
                pattern.dump());
  const auto p = pattern_of_regex(regex->get<std::string>());
  VESCALE_CHECK(p.has_value(), r.source, ": ", path, ".pattern.Regex ", regex->dump(),
                " is not supported: only the GPT-2 regex ", json(std::string(kGpt2Regex)).dump(),
                ", the LLaMA-3 regex ", json(std::string(kLlama3Regex)).dump(),
                " and the Qwen2 regex ", json(std::string(kQwen2Regex)).dump(),
                " have matchers (there is no general regex engine)");
  const std::string behavior = r.string(pt, path, "behavior");
  VESCALE_CHECK(behavior == "Isolated", r.source, ": ", path, ".behavior '", behavior,
                "' is not supported; only Isolated (each match its own piece)");
  VESCALE_CHECK(!r.boolean(pt, path, "invert", false), r.source, ": ", path,
                ".invert true is not supported");
  spec.pattern = *p;
}

void read_pre_tokenizer(const Reader& r, const json& root, TokenizerSpec& spec) {
  const json* pt = r.get(root, "pre_tokenizer");
  VESCALE_CHECK(pt, r.source,
                ": pre_tokenizer is null; only byte-level tokenizers (GPT-2, LLaMA-3 or "
                "Qwen2 style, with a ByteLevel pre_tokenizer) are supported");
  const std::string type = r.type(*pt, "pre_tokenizer");
  if (type == "ByteLevel") return read_byte_level(r, *pt, "pre_tokenizer", false, spec);
  VESCALE_CHECK(type == "Sequence", r.source, ": pre_tokenizer type '", type,
                "' is not supported; use ByteLevel, or Sequence[Split(regex), ByteLevel]");
  const json* list = r.get(*pt, "pretokenizers");
  VESCALE_CHECK(list && list->is_array(), r.source, ": pre_tokenizer.pretokenizers must be a list");
  const std::string shape =
      "; supported: Sequence[Split(GPT-2, LLaMA-3 or Qwen2 regex, Isolated), "
      "ByteLevel(use_regex: false)] or Sequence[ByteLevel]";
  if (list->size() == 1 && r.type((*list)[0], "pre_tokenizer.pretokenizers[0]") == "ByteLevel")
    return read_byte_level(r, (*list)[0], "pre_tokenizer.pretokenizers[0]", false, spec);
  VESCALE_CHECK(list->size() == 2, r.source, ": pre_tokenizer.pretokenizers has ", list->size(),
                " entries", shape);
  const std::string t0 = r.type((*list)[0], "pre_tokenizer.pretokenizers[0]"),
                    t1 = r.type((*list)[1], "pre_tokenizer.pretokenizers[1]");
  VESCALE_CHECK(t0 == "Split" && t1 == "ByteLevel", r.source, ": pre_tokenizer.pretokenizers is [",
                t0, ", ", t1, "]", shape);
  read_split(r, (*list)[0], "pre_tokenizer.pretokenizers[0]", spec);
  read_byte_level(r, (*list)[1], "pre_tokenizer.pretokenizers[1]", true, spec);
}

// NFC (Qwen2's), or a Sequence of NFCs (NFC twice is NFC once; an empty Sequence is none).
void read_normalizer(const Reader& r, const json& n, TokenizerSpec& spec) {
  const char* supported = "; supported: null (GPT-2, LLaMA-3), NFC (Qwen2) or a Sequence of NFC";
  const std::string type = r.type(n, "normalizer");
  if (type == "NFC") {
    spec.normalizer = Normalizer::kNfc;
    return;
  }
  VESCALE_CHECK(type == "Sequence", r.source, ": normalizer type '", type, "' is not supported",
                supported);
  const json* list = r.get(n, "normalizers");
  VESCALE_CHECK(list && list->is_array(), r.source, ": normalizer.normalizers must be a list");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string path = "normalizer.normalizers[" + std::to_string(i) + "]";
    const std::string t = r.type((*list)[i], path);
    VESCALE_CHECK(t == "NFC", r.source, ": ", path, " type '", t, "' is not supported", supported);
    spec.normalizer = Normalizer::kNfc;
  }
}

void read_model(const Reader& r, const json& root, TokenizerSpec& spec) {
  const json& model = r.object(root, "", "model");
  if (r.get(model, "type")) {
    const std::string type = r.string(model, "model", "type");
    VESCALE_CHECK(type == "BPE", r.source, ": model.type '", type, "' is not supported; only BPE");
  }
  if (const json* d = r.get(model, "dropout"))
    VESCALE_CHECK(d->is_number() && d->get<double>() == 0.0, r.source, ": model.dropout ",
                  d->dump(), " is not supported (BPE dropout is for training); set it to null");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = r.get(model, key);
    VESCALE_CHECK(!v || (v->is_string() && v->get<std::string>().empty()), r.source, ": model.",
                  key, " ", v ? v->dump() : "",
                  " is not supported by byte-level BPE; set it to null");
  }
  VESCALE_CHECK(!r.boolean(model, "model", "byte_fallback", false), r.source,
                ": model.byte_fallback true is not supported (it is SentencePiece's; byte-level "
                "BPE has every byte in its alphabet)");
  spec.model.fuse_unk = r.boolean(model, "model", "fuse_unk", false);
  spec.model.ignore_merges = r.boolean(model, "model", "ignore_merges", false);
  if (r.get(model, "unk_token")) spec.model.unk_token = r.string(model, "model", "unk_token");

  const json& vocab = r.object(model, "model", "vocab");
  spec.model.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    VESCALE_CHECK(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 &&
                      it.value().get<int64_t>() < (int64_t(1) << 31),
                  r.source, ": model.vocab[", json(it.key()).dump(),
                  "] must be an id in [0, 2^31), not ", it.value().dump());
    spec.model.vocab.emplace_back(it.key(), it.value().get<int64_t>());
  }
  const json* merges = r.get(model, "merges");
  VESCALE_CHECK(merges && merges->is_array(), r.source, ": model.merges must be a list");
  spec.model.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    if (m.is_string()) {  // the older form: "left right"
      const auto s = m.get<std::string>();
      const auto sp = s.find(' ');
      VESCALE_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size() &&
                        s.find(' ', sp + 1) == std::string::npos,
                    r.source, ": model.merges[", i, "] ", m.dump(),
                    " is not two tokens separated by one space");
      spec.model.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      VESCALE_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), r.source,
                    ": model.merges[", i, "] ", m.dump().substr(0, 80),
                    " must be \"left right\" or [\"left\", \"right\"]");
      spec.model.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
}

void read_added_tokens(const Reader& r, const json& root, TokenizerSpec& spec) {
  const json* list = r.get(root, "added_tokens");
  if (!list) return;
  VESCALE_CHECK(list->is_array(), r.source, ": added_tokens must be a list");
  for (size_t i = 0; i < list->size(); ++i) {
    const json& t = (*list)[i];
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    VESCALE_CHECK(t.is_object(), r.source, ": ", path, " must be an object");
    AddedTokenSpec a;
    const json* id = r.get(t, "id");
    VESCALE_CHECK(id && id->is_number_integer() && id->get<int64_t>() >= 0 &&
                      id->get<int64_t>() < (int64_t(1) << 31),
                  r.source, ": ", path, ".id must be an id in [0, 2^31)");
    a.id = id->get<int64_t>();
    a.content = r.string(t, path, "content");
    VESCALE_CHECK(!a.content.empty(), r.source, ": ", path, ".content is empty");
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      VESCALE_CHECK(!r.boolean(t, path, key, false), r.source, ": ", path, " ('", a.content,
                    "'): ", key,
                    " true is not supported; only added tokens matched exactly as written");
    a.special = r.boolean(t, path, "special", false);
    a.normalized = r.boolean(t, path, "normalized", !a.special);
    spec.added_tokens.push_back(std::move(a));
  }
}

// TemplateProcessing's "single": special tokens around $A.
void read_template(const Reader& r, const json& tp, const std::string& path, TokenizerSpec& spec) {
  const json* single = r.get(tp, "single");
  VESCALE_CHECK(single && single->is_array(), r.source, ": ", path, ".single must be a list");
  const json* specials = r.get(tp, "special_tokens");
  bool seen_a = false;
  spec.prefix_ids.clear();
  spec.suffix_ids.clear();
  for (size_t i = 0; i < single->size(); ++i) {
    const json& item = (*single)[i];
    const std::string ipath = path + ".single[" + std::to_string(i) + "]";
    if (const json* seq = item.is_object() ? r.get(item, "Sequence") : nullptr) {
      const std::string which = r.string(*seq, ipath + ".Sequence", "id");
      VESCALE_CHECK(which == "A" && !seen_a, r.source, ": ", ipath,
                    ": only one $A sequence is supported");
      seen_a = true;
      continue;
    }
    const json* st = item.is_object() ? r.get(item, "SpecialToken") : nullptr;
    VESCALE_CHECK(st, r.source, ": ", ipath,
                  " must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    const std::string name = r.string(*st, ipath + ".SpecialToken", "id");
    const json* entry =
        specials && specials->is_object() ? r.get(*specials, name.c_str()) : nullptr;
    VESCALE_CHECK(entry && entry->is_object() && r.get(*entry, "ids") && (*entry)["ids"].is_array(),
                  r.source, ": ", ipath, " names special token '", name, "', which ", path,
                  ".special_tokens does not list with its ids");
    for (const auto& id : (*entry)["ids"]) {
      VESCALE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0, r.source, ": ", path,
                    ".special_tokens['", name, "'].ids must be ids");
      (seen_a ? spec.suffix_ids : spec.prefix_ids).push_back(id.get<int64_t>());
    }
  }
  VESCALE_CHECK(seen_a, r.source, ": ", path, ".single has no {\"Sequence\": {\"id\": \"A\"}}");
}

void read_post_processor(const Reader& r, const json& pp, const std::string& path,
                         TokenizerSpec& spec) {
  const std::string type = r.type(pp, path);
  if (type == "ByteLevel") return;  // offsets only; the ids are unchanged
  if (type == "TemplateProcessing") return read_template(r, pp, path, spec);
  VESCALE_CHECK(type == "Sequence", r.source, ": ", path, " type '", type,
                "' is not supported; only ByteLevel, TemplateProcessing and a Sequence of them");
  const json* list = r.get(pp, "processors");
  VESCALE_CHECK(list && list->is_array(), r.source, ": ", path, ".processors must be a list");
  for (size_t i = 0; i < list->size(); ++i)
    read_post_processor(r, (*list)[i], path + ".processors[" + std::to_string(i) + "]", spec);
}

}  // namespace

TokenizerSpec parse_tokenizer_json(const std::string& text, const std::string& source) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number too large
    VESCALE_FAIL(source, ": not valid JSON (", e.what(),
                 "); expected a Hugging Face tokenizer.json");
  }
  VESCALE_CHECK(root.is_object(), source, ": expected a Hugging Face tokenizer.json object");
  const Reader r{source};
  TokenizerSpec spec;
  try {
    if (const json* n = r.get(root, "normalizer")) read_normalizer(r, *n, spec);
    for (const char* key : {"truncation", "padding"})
      VESCALE_CHECK(!r.get(root, key), source, ": ", key,
                    " is set; truncation and padding are not supported (set it to null)");
    read_model(r, root, spec);
    read_pre_tokenizer(r, root, spec);
    read_added_tokens(r, root, spec);
    if (const json* pp = r.get(root, "post_processor"))
      read_post_processor(r, *pp, "post_processor", spec);
    const json* dec = r.get(root, "decoder");
    VESCALE_CHECK(dec, source, ": decoder is null; only the ByteLevel decoder is supported");
    const std::string dtype = r.type(*dec, "decoder");
    VESCALE_CHECK(dtype == "ByteLevel", source, ": decoder type '", dtype,
                  "' is not supported; only ByteLevel");
  } catch (const json::exception& e) {  // a wrongly typed field the checks above did not foresee
    VESCALE_FAIL(source, ": unexpected tokenizer.json content (", e.what(), ")");
  }
  return spec;
}

}  // namespace vescale::tokenizer
