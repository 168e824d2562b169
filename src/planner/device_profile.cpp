#include "vescale/planner/device_profile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "vescale/common/check.h"
#include "vescale/train/shipped_files.h"

namespace vescale::planner {
namespace {

using json = nlohmann::json;

std::string devices_dir() { return train::shipped_dir("configs") + "/devices"; }

double positive(const json& j, const char* key, const std::string& source) {
  VESCALE_CHECK(j.contains(key) && j[key].is_number() && j[key].get<double>() > 0,
                "device profile '", source, "': ", key,
                " must be a positive number (see configs/devices/h100.json)");
  return j[key].get<double>();
}

Link link(const json& j, const char* key, const std::string& source) {
  VESCALE_CHECK(j.contains(key) && j[key].is_object(), "device profile '", source, "': ", key,
                " must be an object {\"bandwidth\": bytes/s, \"latency\": seconds}");
  const json& l = j[key];
  VESCALE_CHECK(l.contains("latency") && l["latency"].is_number() && l["latency"].get<double>() >= 0,
                "device profile '", source, "': ", key, ".latency must be a number of seconds >= 0");
  return {positive(l, "bandwidth", source + "." + key), l["latency"].get<double>()};
}

}  // namespace

DeviceProfile device_profile_from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    VESCALE_FAIL("device profile '", source, "': not valid JSON: ", e.what());
  }
  VESCALE_CHECK(j.is_object(), "device profile '", source, "': the top level must be an object");
  DeviceProfile p;
  p.name = j.value("name", std::filesystem::path(source).stem().string());
  p.peak_flops = positive(j, "peak_flops", source);
  p.memory_bytes = positive(j, "memory_bytes", source);
  p.memory_bandwidth = positive(j, "memory_bandwidth", source);
  p.gemm_efficiency = positive(j, "gemm_efficiency", source);
  VESCALE_CHECK(p.gemm_efficiency <= 1, "device profile '", source,
                "': gemm_efficiency is a fraction of the peak, at most 1");
  p.gemm_half_work = positive(j, "gemm_half_work", source);
  if (j.contains("op_overhead")) {
    VESCALE_CHECK(j["op_overhead"].is_number() && j["op_overhead"].get<double>() >= 0,
                  "device profile '", source, "': op_overhead must be seconds >= 0");
    p.op_overhead = j["op_overhead"].get<double>();
  }
  p.intra_node = link(j, "intra_node", source);
  p.inter_node = link(j, "inter_node", source);
  p.gpus_per_node = static_cast<int64_t>(positive(j, "gpus_per_node", source));
  if (j.contains("sources") && j["sources"].is_object())
    for (const auto& [k, v] : j["sources"].items())
      if (v.is_string()) p.sources[k] = v.get<std::string>();
  return p;
}

std::vector<std::string> device_profile_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(devices_dir(), ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

DeviceProfile device_profile(const std::string& name_or_path) {
  std::string path = name_or_path;
  if (!std::filesystem::is_regular_file(path)) {
    path = devices_dir() + "/" + name_or_path + ".json";
    if (!std::filesystem::is_regular_file(path)) {
      std::string known;
      for (const auto& n : device_profile_names()) known += (known.empty() ? "" : ", ") + n;
      VESCALE_FAIL("--device '", name_or_path, "': no such profile; shipped: ", known,
                   ", or a profile JSON file (vescale-plan --calibrate writes one)");
    }
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return device_profile_from_json(text.str(), path);
}

std::string to_json(const DeviceProfile& p) {
  json j;
  j["name"] = p.name;
  j["peak_flops"] = p.peak_flops;
  j["memory_bytes"] = p.memory_bytes;
  j["memory_bandwidth"] = p.memory_bandwidth;
  j["gemm_efficiency"] = p.gemm_efficiency;
  j["gemm_half_work"] = p.gemm_half_work;
  j["op_overhead"] = p.op_overhead;
  j["intra_node"] = {{"bandwidth", p.intra_node.bandwidth}, {"latency", p.intra_node.latency}};
  j["inter_node"] = {{"bandwidth", p.inter_node.bandwidth}, {"latency", p.inter_node.latency}};
  j["gpus_per_node"] = p.gpus_per_node;
  j["sources"] = p.sources;
  return j.dump(2);
}

}  // namespace vescale::planner
