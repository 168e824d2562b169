// The files vescale ships beside its binaries: the configs (with their plans) and the built-in
// data. Installed, they are <prefix>/share/vescale/{configs,data}; in a build tree the build
// makes the same layout (<build>/share/vescale/configs links to the sources' configs/, data to
// the tokenized corpus), so one rule finds them from the running binary.
#pragma once
#include <string>

namespace vescale::train {

// <folder of the running binary>/../share/vescale/<what> ("configs" or "data"), normalized.
std::string shipped_dir(const std::string& what);

// What --config names: a file as given when it exists; else, for a bare name ("nanogpt_tiny"
// or "nanogpt_tiny.json"), the shipped config of that name. Throws listing the shipped configs
// when neither exists.
std::string find_config(const std::string& name);

}  // namespace vescale::train
