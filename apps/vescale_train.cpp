// vescale-train: the training entry point.
//   vescale-train --config configs/X.json [--set a.b=v ...] [--nproc-per-node N] [--dry-run]
// With --nproc-per-node (or --nnodes) it starts its own ranks through the built-in launcher.
// The trainer itself arrives with the models/trainer issue; today a run reports the launch
// env and the mesh the config asks for (--dry-run) and stops.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "launch_flags.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/world.h"
#include "vescale/mesh/device_mesh.h"

namespace {

// --set a.b.c=value: the key must exist; the value is JSON if it parses, else a string.
void apply_override(nlohmann::ordered_json& cfg, const std::string& path, const std::string& kv) {
  const auto eq = kv.find('=');
  VESCALE_CHECK(eq != std::string::npos && eq > 0, "--set '", kv, "': expected key=value, like train.steps=200");
  const std::string key = kv.substr(0, eq), text = kv.substr(eq + 1);
  nlohmann::ordered_json* node = &cfg;
  std::string walked;
  for (size_t b = 0, e; b <= key.size(); b = e + 1) {
    e = key.find('.', b);
    if (e == std::string::npos) e = key.size();
    const std::string part = key.substr(b, e - b);
    walked += (walked.empty() ? "" : ".") + part;
    VESCALE_CHECK(node->is_object() && node->contains(part), "--set ", key, ": config '", path, "' has no key '",
                  walked, "'; check the spelling against the config file");
    node = &(*node)[part];
  }
  nlohmann::ordered_json value;
  try {
    value = nlohmann::ordered_json::parse(text);
  } catch (const std::exception&) {
    value = text;
  }
  VESCALE_CHECK(std::string(value.type_name()) == node->type_name() || (value.is_number() && node->is_number()),
                "--set ", key, ": the config has a ", node->type_name(), " there, not a ", value.type_name(), " ('",
                text, "')");
  *node = value;
}

// parallel.mesh: {"dp": 2, "tp": 2} in order; default one dp dim over the whole world.
vescale::mesh::MeshDims mesh_dims_from_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream f(path);
  VESCALE_CHECK(f.good(), "config: cannot open '", path, "'; pass an existing file to --config");
  nlohmann::ordered_json cfg;
  try {
    cfg = nlohmann::ordered_json::parse(f);
  } catch (const std::exception& e) {
    VESCALE_FAIL("config '", path, "': not valid JSON: ", e.what());
  }
  for (auto& kv : overrides) apply_override(cfg, path, kv);
  vescale::mesh::MeshDims dims;
  if (cfg.contains("parallel") && cfg["parallel"].contains("mesh")) {
    auto& m = cfg["parallel"]["mesh"];
    VESCALE_CHECK(m.is_object(), "config '", path, "': parallel.mesh must be an object like {\"dp\": 2, \"tp\": 2}");
    for (auto& [name, size] : m.items()) {
      VESCALE_CHECK(size.is_number_integer(), "config '", path, "': parallel.mesh.", name,
                    " must be an integer (or -1 to infer it)");
      dims.emplace_back(name, size.get<int64_t>());
    }
  }
  if (dims.empty()) dims.emplace_back("dp", -1);
  return dims;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vescale-train: SPMD training of the model in a config"};
  vescale::dist::LauncherOptions launch;
  vescale::apps::add_launch_flags(app, launch);
  std::string config, log_level;
  std::vector<std::string> overrides;
  bool dry_run = false;
  app.add_option("--config", config, "train config (JSON)")->required();
  app.add_option("--set", overrides, "override a config field: --set train.steps=200");
  app.add_flag("--dry-run", dry_run, "show the launch env and the mesh, then stop");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off (default: info on rank 0)");
  CLI11_PARSE(app, argc, argv);

  try {
    // Not yet a rank: start the ranks, each running this same command line.
    if (!std::getenv("VESCALE_LAUNCHED") && (launch.nproc_per_node > 1 || launch.nnodes > 1)) {
      std::vector<std::string> cmd{"/proc/self/exe"};
      for (int i = 1; i < argc; ++i) cmd.emplace_back(argv[i]);
      return vescale::dist::launch(launch, cmd);
    }
    auto dims = mesh_dims_from_config(config, overrides);
    vescale::dist::init();
    vescale::log::init(vescale::dist::rank(), log_level);
    auto mesh = vescale::mesh::DeviceMesh::init(dims);
    const auto& env = vescale::dist::launch_env();
    std::printf("%s (launched by %s, device %s)\n", mesh.to_string().c_str(), env.source.c_str(),
                vescale::dist::device_string().c_str());
    std::fflush(stdout);
    vescale::dist::shutdown();
    if (dry_run) return 0;
    vescale::log::error("vescale-train: the trainer is not built yet; only --dry-run works in this version");
    return 1;
  } catch (const vescale::Error& e) {
    std::fprintf(stderr, "vescale-train: %s\n", e.what());
    return 1;
  }
}
