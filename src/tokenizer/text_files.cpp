#include "tokenizer/text_files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "vescale/common/check.h"

namespace vescale::tokenizer {

TextFiles::TextFiles(const std::vector<std::string>& paths) : paths_(paths) {
  for (const auto& p : paths) {
    struct stat st {};
    VESCALE_CHECK(::stat(p.c_str(), &st) == 0, "cannot open '", p, "': ", std::strerror(errno));
    VESCALE_CHECK(S_ISREG(st.st_mode), "'", p, "' is not a regular file; pass text files");
    total_ += static_cast<uint64_t>(st.st_size);
  }
}

bool TextFiles::read(std::string& out, size_t n) {
  while (index_ < paths_.size()) {
    if (!file_.is_open()) {
      file_.open(paths_[index_], std::ios::binary);
      VESCALE_CHECK(file_.good(), "cannot open '", paths_[index_], "': ", std::strerror(errno));
      offset_ = 0;
    }
    const size_t start = out.size();
    out.resize(start + n);
    file_.read(out.data() + start, static_cast<std::streamsize>(n));
    const size_t got = static_cast<size_t>(file_.gcount());
    out.resize(start + got);
    if (const void* nul = std::memchr(out.data() + start, '\0', got))
      VESCALE_FAIL("'", paths_[index_], "' looks binary, not text (a NUL byte at offset ",
                   offset_ + (static_cast<const char*>(nul) - (out.data() + start)),
                   "); pass UTF-8 text files");
    offset_ += got;
    if (got > 0) return true;
    file_.close();
    ++index_;
  }
  return false;
}

}  // namespace vescale::tokenizer
