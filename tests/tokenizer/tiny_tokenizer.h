// Hand-made tokenizer.json files for the tokenizer tests: every byte's token (id = the byte),
// then one token per merge, in order.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"

namespace vescale::testing {

enum class Layout { kGpt2, kGpt2Prefix, kLlama3, kQwen2 };  // kQwen2: with the NFC normalizer

// merges as raw byte strings: {"a", "b"} makes token "ab" (id 256 + its index).
inline nlohmann::json tiny_tokenizer(Layout layout,
                                     const std::vector<std::pair<std::string, std::string>>& merges,
                                     bool ignore_merges = false) {
  using nlohmann::json;
  using tokenizer::bytes_to_byte_level;
  json vocab = json::object(), merge_list = json::array();
  for (int b = 0; b < 256; ++b)
    vocab[bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  int next = 256;
  for (const auto& [a, b] : merges) {
    merge_list.push_back({bytes_to_byte_level(a), bytes_to_byte_level(b)});
    if (!vocab.contains(bytes_to_byte_level(a + b))) vocab[bytes_to_byte_level(a + b)] = next++;
  }
  json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", layout == Layout::kGpt2Prefix},
                     {"trim_offsets", true},
                     {"use_regex", layout == Layout::kGpt2 || layout == Layout::kGpt2Prefix}};
  json pre = byte_level;
  if (layout == Layout::kLlama3 || layout == Layout::kQwen2)
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            {{{"type", "Split"},
              {"pattern",
               {{"Regex", std::string(layout == Layout::kLlama3 ? tokenizer::kLlama3Regex
                                                                : tokenizer::kQwen2Regex)}}},
              {"behavior", "Isolated"},
              {"invert", false}},
             byte_level}}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array()},
          {"normalizer", layout == Layout::kQwen2 ? json{{"type", "NFC"}} : json(nullptr)},
          {"pre_tokenizer", pre},
          {"post_processor", {{"type", "ByteLevel"}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", ignore_merges},
            {"vocab", vocab},
            {"merges", merge_list}}}};
}

// Adds an added token (id = the next free one) and returns its id.
inline int64_t add_token(nlohmann::json& j, const std::string& content, bool special,
                         bool normalized) {
  int64_t id = static_cast<int64_t>(j["model"]["vocab"].size());
  for (const auto& t : j["added_tokens"]) id = std::max(id, t["id"].get<int64_t>() + 1);
  j["added_tokens"].push_back({{"id", id},
                               {"content", content},
                               {"single_word", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"normalized", normalized},
                               {"special", special}});
  return id;
}

}  // namespace vescale::testing
