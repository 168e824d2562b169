#include "vescale/train/shipped_files.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "vescale/common/check.h"

namespace vescale::train {

namespace fs = std::filesystem;

namespace {

fs::path exe_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  return fs::path(buf).parent_path();
}

}  // namespace

std::string shipped_dir(const std::string& what) {
  return (exe_dir() / ".." / "share" / "vescale" / what).lexically_normal().string();
}

std::string find_config(const std::string& name) {
  std::error_code ec;
  if (fs::exists(name, ec) || name.find('/') != std::string::npos) return name;
  const fs::path dir = shipped_dir("configs");
  const std::string file = fs::path(name).extension() == ".json" ? name : name + ".json";
  if (fs::is_regular_file(dir / file, ec)) return (dir / file).string();
  std::vector<std::string> shipped;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") shipped.push_back(e.path().stem().string());
  std::sort(shipped.begin(), shipped.end());
  std::string list;
  for (const auto& s : shipped) list += (list.empty() ? "" : ", ") + s;
  VESCALE_FAIL("config: '", name, "' is neither a file nor a shipped config",
               list.empty() ? " (no shipped configs found in " + dir.string() + ")"
                            : "; the shipped ones (" + dir.string() + "): " + list,
               ". Pass a path to --config, or one of those names");
}

}  // namespace vescale::train
