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

LinkFigures figures(const json& l, const std::string& where) {
  VESCALE_CHECK(l.is_object(), "device profile '", where,
                "' must be an object {\"bandwidth\": bytes/s, \"latency\": seconds}");
  VESCALE_CHECK(l.contains("latency") && l["latency"].is_number() && l["latency"].get<double>() >= 0,
                "device profile '", where, ".latency' must be a number of seconds >= 0");
  return {positive(l, "bandwidth", where), l["latency"].get<double>()};
}

Link link(const json& j, const char* key, const std::string& source) {
  VESCALE_CHECK(j.contains(key), "device profile '", source, "': ", key,
                " must be an object {\"bandwidth\": bytes/s, \"latency\": seconds}");
  Link out;
  static_cast<LinkFigures&>(out) = figures(j[key], source + "': '" + key);
  for (Collective c : kCollectives)
    if (j[key].contains(to_string(c)))
      out.measured[c] = figures(j[key][to_string(c)], source + "': '" + key + "." + to_string(c));
  return out;
}

json link_json(const Link& l) {
  json j = {{"bandwidth", l.bandwidth}, {"latency", l.latency}};
  for (const auto& [c, f] : l.measured)
    j[to_string(c)] = {{"bandwidth", f.bandwidth}, {"latency", f.latency}};
  return j;
}

}  // namespace

const char* to_string(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllToAll: return "all_to_all";
  }
  return "?";
}

double DeviceProfile::peak(bool fp32) const {
  if (!fp32) return peak_flops;
  VESCALE_CHECK(fp32_peak_flops > 0, "device profile '", name, "' has no fp32_peak_flops, so it ",
                "cannot plan an fp32 config: add the device's dense fp32 FLOP/s to the profile, or "
                "plan with train.dtype=bf16");
  return fp32_peak_flops;
}

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
  if (j.contains("fp32_peak_flops")) p.fp32_peak_flops = positive(j, "fp32_peak_flops", source);
  if (j.contains("attention_keeps_probabilities")) {
    VESCALE_CHECK(j["attention_keeps_probabilities"].is_boolean(), "device profile '", source,
                  "': attention_keeps_probabilities must be true or false");
    p.attention_keeps_probabilities = j["attention_keeps_probabilities"].get<bool>();
  }
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
  if (p.fp32_peak_flops > 0) j["fp32_peak_flops"] = p.fp32_peak_flops;
  j["memory_bytes"] = p.memory_bytes;
  j["memory_bandwidth"] = p.memory_bandwidth;
  j["gemm_efficiency"] = p.gemm_efficiency;
  j["gemm_half_work"] = p.gemm_half_work;
  j["op_overhead"] = p.op_overhead;
  j["attention_keeps_probabilities"] = p.attention_keeps_probabilities;
  j["intra_node"] = link_json(p.intra_node);
  j["inter_node"] = link_json(p.inter_node);
  j["gpus_per_node"] = p.gpus_per_node;
  j["sources"] = p.sources;
  return j.dump(2);
}

}  // namespace vescale::planner
