// Block patterns name a model's repeated blocks ("layers.*", "h.*") for the transforms that
// act per block (activation checkpointing, ZeRO-3's gather units, the timeline's block spans):
// '*' stands for exactly one name component, so "h.*" matches "h.3" but not "h" or
// "h.3.attn". (Plans' parameter patterns are plan::fqn_match's, where '*' spans dots.)
#pragma once
#include <string>

namespace torch::nn {
class Module;
}

namespace vescale::nn {

bool block_match(const std::string& pattern, const std::string& fqn);

// Whether some submodule of `root` (not root itself) matches `pattern`.
bool has_block(torch::nn::Module& root, const std::string& pattern);

}  // namespace vescale::nn
