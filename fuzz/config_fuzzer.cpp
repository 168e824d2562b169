// libFuzzer target for the train config parser. The bytes up to the first NUL are the JSON;
// the lines after it are `--set` overrides. Config::from_json must work or throw
// vescale::Error; a config it accepts must survive to_json() and from_json() again,
// unchanged. Anything else (a crash, a sanitizer report, a hang, another exception, a
// round trip that fails or differs) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "vescale/common/check.h"
#include "vescale/train/config.h"

using vescale::train::Config;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string text = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string::npos)
    for (size_t b = nul + 1, e; b < input.size(); b = e + 1) {
      e = input.find('\n', b);
      if (e == std::string::npos) e = input.size();
      if (e > b) overrides.push_back(input.substr(b, e - b));
    }
  Config c;
  try {
    c = Config::from_json(text, "fuzz.json", overrides);  // no base_dir: paths stay as written
  } catch (const vescale::Error&) {
    return 0;
  }
  const std::string once = c.to_json();
  try {
    const std::string twice = Config::from_json(once, "fuzz.json").to_json();
    if (twice != once) {
      std::fprintf(stderr, "config round trip changed it:\n%s\n---\n%s\n", once.c_str(),
                   twice.c_str());
      std::abort();
    }
  } catch (const vescale::Error& e) {
    std::fprintf(stderr, "an accepted config failed its own round trip: %s\n%s\n", e.what(),
                 once.c_str());
    std::abort();
  }
  return 0;
}
