#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "vescale/common/check.h"
#include "vescale/train/shipped_files.h"
#include "vescale/train/trainer.h"

namespace vescale::train {

namespace {

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> data_files(const DataConfig& data, const std::string& split) {
  const auto& patterns = split == "train" ? data.train : data.val;
  // The built-in data, tokenized by the build and installed beside our binaries
  // (shipped_files.h, data/README.md).
  const char* env = std::getenv("VESCALE_DATA_DIR");
  const std::string builtin_dir = env && *env ? env : shipped_dir("data");
  const std::string missing =
      "; build and install it (the builtin_data target, then cmake --install), or set "
      "VESCALE_DATA_DIR to the folder that holds it";
  if (data.train.empty() && data.val.empty()) {
    const std::string path = builtin_dir + "/corpus_" + split + ".bin";
    VESCALE_CHECK(std::filesystem::exists(path),
                  "data: the config names no files, and the built-in corpus '", path,
                  "' is missing", missing, "; or set data.train and data.val");
    return {std::filesystem::path(path).lexically_normal().string()};
  }
  std::vector<std::string> files;
  for (const auto& entry : patterns) {
    // "builtin:corpus_bpe2048_train.bin": a file of the built-in data, wherever the build is.
    const std::string p =
        entry.rfind("builtin:", 0) == 0
            ? (std::filesystem::path(builtin_dir) / entry.substr(8)).lexically_normal().string()
            : entry;
    auto matched = expand_glob(p);
    VESCALE_CHECK(!matched.empty(), "data.", split, ": '", p, "' matches no file",
                  p == entry ? "" : missing);
    files.insert(files.end(), matched.begin(), matched.end());
  }
  return files;
}

}  // namespace vescale::train
