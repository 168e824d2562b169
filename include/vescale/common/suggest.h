// "Did you mean": the closest known name to a misspelt one, for error messages.
#pragma once
#include <string>
#include <vector>

namespace vescale {

// The candidate nearest to `word` by edit distance (swapped neighbours count as one edit), or
// "" when none is within max(2, |word| / 3) edits.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace vescale
