// Writing llm.c .bin files: a header, then the tokens in the narrowest width the vocabulary
// allows; the count goes into the header last, so a stream of unknown length needs no second pass.
#include "vescale/tokenizer/token_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "vescale/common/check.h"

namespace vescale::tokenizer {

void write_token_file(const std::string& path, const std::vector<int64_t>& tokens) {
  const bool narrow =
      std::all_of(tokens.begin(), tokens.end(), [](int64_t t) { return t >= 0 && t < 65536; });
  for (auto t : tokens)
    VESCALE_CHECK(t >= 0 && t <= 0xffffffffll, "data: token ", t, " does not fit uint32");
  VESCALE_CHECK(tokens.size() <= 0x7fffffffull, "data: ", tokens.size(),
                " tokens are too many for one .bin file");
  int32_t header[256] = {};
  header[0] = narrow ? kTokenFileMagicU16 : kTokenFileMagicU32;
  header[1] = narrow ? kTokenFileVersionU16 : kTokenFileVersionU32;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream f(path, std::ios::binary);
  VESCALE_CHECK(f.good(), "data: cannot write '", path, "'");
  f.write(reinterpret_cast<const char*>(header), sizeof header);
  for (auto t : tokens) {
    if (narrow) {
      const uint16_t v = static_cast<uint16_t>(t);
      f.write(reinterpret_cast<const char*>(&v), 2);
    } else {
      const uint32_t v = static_cast<uint32_t>(t);
      f.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
  VESCALE_CHECK(f.good(), "data: writing '", path, "' failed (disk full?)");
}

TokenFileWriter::TokenFileWriter(const std::string& path, int64_t vocab_size)
    : path_(path), vocab_size_(vocab_size), wide_(vocab_size > 65536) {
  VESCALE_CHECK(vocab_size > 0 && vocab_size <= 0x100000000ll, "data: vocab size ", vocab_size,
                " does not fit a .bin file's uint32 tokens");
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  VESCALE_CHECK(fd_ >= 0, "data: cannot write '", path, "': ", std::strerror(errno));
  int32_t header[256] = {};
  header[0] = wide_ ? kTokenFileMagicU32 : kTokenFileMagicU16;
  header[1] = wide_ ? kTokenFileVersionU32 : kTokenFileVersionU16;
  VESCALE_CHECK(::write(fd_, header, sizeof header) == static_cast<ssize_t>(sizeof header),
                "data: writing '", path, "' failed: ", std::strerror(errno));
}

TokenFileWriter::~TokenFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TokenFileWriter::write(const int64_t* tokens, size_t n) {
  VESCALE_CHECK(fd_ >= 0, "data: '", path_, "' is already closed");
  const size_t width = wide_ ? 4 : 2;
  buffer_.resize(n * width);
  for (size_t i = 0; i < n; ++i) {
    const int64_t t = tokens[i];
    VESCALE_CHECK(t >= 0 && t < vocab_size_, "data: token ", t, " for '", path_,
                  "' is outside the vocabulary of ", vocab_size_);
    if (wide_) {
      const uint32_t v = static_cast<uint32_t>(t);
      std::memcpy(buffer_.data() + 4 * i, &v, 4);
    } else {
      const uint16_t v = static_cast<uint16_t>(t);
      std::memcpy(buffer_.data() + 2 * i, &v, 2);
    }
  }
  VESCALE_CHECK(count_ + static_cast<int64_t>(n) <= 0x7fffffffll, "data: '", path_,
                "' would hold more than 2^31 - 1 tokens, the most a .bin header counts; split the "
                "input into several runs");
  for (size_t done = 0; done < buffer_.size();) {
    const ssize_t w = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    VESCALE_CHECK(w > 0, "data: writing '", path_, "' failed: ", std::strerror(errno),
                  " (disk full?)");
    done += static_cast<size_t>(w);
  }
  count_ += static_cast<int64_t>(n);
}

void TokenFileWriter::close() {
  if (fd_ < 0) return;
  const int32_t count = static_cast<int32_t>(count_);
  const bool ok = ::pwrite(fd_, &count, sizeof count, 2 * sizeof(int32_t)) == sizeof count;
  const int err = errno;
  ::close(fd_);
  fd_ = -1;
  VESCALE_CHECK(ok, "data: writing the header of '", path_, "' failed: ", std::strerror(err));
}

void truncate_token_file(const std::string& path, int64_t n) {
  const int fd = ::open(path.c_str(), O_RDWR);
  VESCALE_CHECK(fd >= 0, "data: cannot open '", path, "': ", std::strerror(errno));
  int32_t h[3] = {};
  const bool read_ok = ::pread(fd, h, sizeof h, 0) == sizeof h;
  const int width = h[0] == kTokenFileMagicU32 ? 4 : 2;
  const bool ok =
      read_ok && (h[0] == kTokenFileMagicU16 || h[0] == kTokenFileMagicU32) && n >= 0 && n <= h[2];
  if (ok) {
    const int32_t count = static_cast<int32_t>(n);
    const bool done = ::pwrite(fd, &count, sizeof count, 2 * sizeof(int32_t)) == sizeof count &&
                      ::ftruncate(fd, static_cast<off_t>(kTokenFileHeaderBytes + n * width)) == 0;
    ::close(fd);
    VESCALE_CHECK(done, "data: cutting '", path, "' to ", n,
                  " tokens failed: ", std::strerror(errno));
    return;
  }
  ::close(fd);
  VESCALE_FAIL("data: cannot cut '", path, "' to ", n,
               " tokens: not a .bin token file with at least ", n, " tokens");
}

void split_token_file(const std::string& from, const std::string& to, int64_t n) {
  const int in = ::open(from.c_str(), O_RDONLY);
  VESCALE_CHECK(in >= 0, "data: cannot open '", from, "': ", std::strerror(errno));
  int32_t h[3] = {};
  const bool ok = ::pread(in, h, sizeof h, 0) == sizeof h &&
                  (h[0] == kTokenFileMagicU16 || h[0] == kTokenFileMagicU32) && n >= 0 && n <= h[2];
  if (!ok) ::close(in);
  VESCALE_CHECK(ok, "data: cannot split the last ", n, " tokens off '", from,
                "': not a .bin token file with at least ", n, " tokens");
  const size_t width = h[0] == kTokenFileMagicU32 ? 4 : 2;
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int open_err = errno;
  if (out < 0) ::close(in);
  VESCALE_CHECK(out >= 0, "data: cannot write '", to, "': ", std::strerror(open_err));
  int32_t header[256] = {h[0], h[1], static_cast<int32_t>(n)};
  bool done = ::write(out, header, sizeof header) == static_cast<ssize_t>(sizeof header);
  // The tail's bytes as they are: both files have the same width.
  std::vector<char> block(size_t{1} << 20);
  off_t at = static_cast<off_t>(kTokenFileHeaderBytes + (h[2] - n) * width);
  bool short_read = false;
  for (size_t left = static_cast<size_t>(n) * width; done && left > 0;) {
    const ssize_t got = ::pread(in, block.data(), std::min(left, block.size()), at);
    short_read = got <= 0;
    done = !short_read && ::write(out, block.data(), static_cast<size_t>(got)) == got;
    at += std::max<ssize_t>(got, 0);
    left -= static_cast<size_t>(std::max<ssize_t>(got, 0));
  }
  const int err = errno;
  ::close(in);
  done = ::close(out) == 0 && done;
  VESCALE_CHECK(!short_read, "data: '", from, "' is shorter than the ", h[2],
                " tokens its header counts; the file is truncated");
  VESCALE_CHECK(done, "data: writing '", to, "' failed: ", std::strerror(err), " (disk full?)");
  truncate_token_file(from, h[2] - n);
}

}  // namespace vescale::tokenizer
