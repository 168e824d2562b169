// llm.c's .bin token files, as vescale-tokenize writes them (and train/token_data.h reads them):
// a 256 x int32 header then the tokens, magic 20240520 with version 1 for uint16 tokens (GPT-2)
// or magic 20240801 with version 7 for uint32 tokens (LLaMA-3); header[2] is the token count.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vescale::tokenizer {

inline constexpr int32_t kTokenFileMagicU16 = 20240520, kTokenFileVersionU16 = 1;
inline constexpr int32_t kTokenFileMagicU32 = 20240801, kTokenFileVersionU32 = 7;
inline constexpr size_t kTokenFileHeaderBytes = 256 * sizeof(int32_t);

// Writes tokens as a .bin shard (uint16 if every token fits, else uint32).
void write_token_file(const std::string& path, const std::vector<int64_t>& tokens);

// Writes a .bin shard as the tokens come, so memory stays flat however long the stream:
// uint16 tokens when vocab_size <= 65536, else uint32. close() writes the count into the
// header (until then it says 0). Throws naming the file, and for an id outside the vocabulary.
class TokenFileWriter {
 public:
  TokenFileWriter(const std::string& path, int64_t vocab_size);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;
  void write(const int64_t* tokens, size_t n);
  int64_t count() const { return count_; }
  void close();

 private:
  std::string path_;
  int64_t vocab_size_;
  bool wide_;
  int fd_ = -1;
  int64_t count_ = 0;
  std::vector<uint8_t> buffer_;
};

// Keeps the first n tokens of a .bin file: the header's count becomes n, the rest is cut off.
void truncate_token_file(const std::string& path, int64_t n);

// Moves the last n tokens of the .bin file `from` into a new .bin file `to` of the same token
// width (a validation split); `from` keeps the tokens before them.
void split_token_file(const std::string& from, const std::string& to, int64_t n);

}  // namespace vescale::tokenizer
