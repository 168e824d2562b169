// The input files of a tokenization as one stream of bytes, read in pieces; a file that is not
// text (a NUL byte: an image, an archive, a .bin) is refused rather than tokenized.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace vescale::tokenizer {

class TextFiles {
 public:
  // Throws naming the file when one is missing or not a regular file.
  explicit TextFiles(const std::vector<std::string>& paths);
  // Appends up to n bytes to `out` (fewer at the end of a file); false at the end of the last.
  // Throws naming the file and the offset of a NUL byte.
  bool read(std::string& out, size_t n);
  uint64_t total_bytes() const { return total_; }

 private:
  std::vector<std::string> paths_;
  size_t index_ = 0;
  uint64_t offset_ = 0, total_ = 0;
  std::ifstream file_;
};

}  // namespace vescale::tokenizer
