#include "vescale/nn/block_pattern.h"

#include <torch/nn/module.h>

#include <vector>

namespace vescale::nn {
namespace {

std::vector<std::string> components(const std::string& s) {
  std::vector<std::string> parts;
  for (size_t b = 0, e; b <= s.size(); b = e + 1) {
    e = s.find('.', b);
    if (e == std::string::npos) e = s.size();
    parts.push_back(s.substr(b, e - b));
  }
  return parts;
}

}  // namespace

bool block_match(const std::string& pattern, const std::string& fqn) {
  const auto p = components(pattern), f = components(fqn);
  if (p.size() != f.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != "*" && p[i] != f[i]) return false;
  return true;
}

bool has_block(torch::nn::Module& root, const std::string& pattern) {
  for (const auto& m : root.named_modules("", false))
    if (block_match(pattern, m.key())) return true;
  return false;
}

}  // namespace vescale::nn
