#include "vescale/planner/device_profile.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>
#include <utility>

#include "vescale/common/check.h"
#include "vescale/common/json_schema.h"
#include "vescale/train/shipped_files.h"

namespace vescale::planner {
namespace {

using json_schema::Reader;
using json_schema::Writer;

std::string devices_dir() { return train::shipped_dir("configs") + "/devices"; }

// What a number of the profile must be: required and positive, positive where given (absent: 0,
// not known), required and at least 0, at least 0 where given.
enum class Rule { Positive, PositiveIfGiven, AtLeastZero, AtLeastZeroIfGiven };

void number(Reader& r, const char* k, double& x, Rule rule) {
  const bool optional = rule == Rule::PositiveIfGiven || rule == Rule::AtLeastZeroIfGiven;
  const bool positive = rule == Rule::Positive || rule == Rule::PositiveIfGiven;
  if (!r.raw(k)) {
    if (optional) return;
    r.fail(k, "missing (see configs/devices/h100.json)");
  }
  r.field(k, x);
  if (positive && !(x > 0)) r.fail(k, "must be a positive number (see configs/devices/h100.json)");
  if (!positive && !(x >= 0)) r.fail(k, "must be a number >= 0");
}

void number(Writer& w, const char* k, const double& x, Rule rule) {
  if (rule != Rule::PositiveIfGiven || x > 0) w.field(k, x);  // an unknown figure stays absent
}

template <class V>
void visit(V& v, LinkFigures& f) {
  number(v, "bandwidth", f.bandwidth, Rule::Positive);
  number(v, "latency", f.latency, Rule::AtLeastZero);
}

// A link class: its figures, and those of each collective measured on its own.
template <class V>
void visit(V& v, Link& link) {
  visit(v, static_cast<LinkFigures&>(link));
  for (Collective c : kCollectives)
    if (std::is_same_v<V, Reader> || link.measured.count(c))
      v.object(to_string(c), [&](auto& s) { visit(s, link.measured[c]); });
}

// The profile's schema, read and written (configs/devices/h100.json is an example).
template <class V>
void visit(V& v, DeviceProfile& p) {
  v.field("name", p.name);
  number(v, "peak_flops", p.peak_flops, Rule::Positive);
  number(v, "fp32_peak_flops", p.fp32_peak_flops, Rule::PositiveIfGiven);
  number(v, "memory_bytes", p.memory_bytes, Rule::Positive);
  number(v, "memory_bandwidth", p.memory_bandwidth, Rule::Positive);
  number(v, "gemm_efficiency", p.gemm_efficiency, Rule::Positive);
  number(v, "gemm_half_work", p.gemm_half_work, Rule::Positive);
  number(v, "op_overhead", p.op_overhead, Rule::AtLeastZeroIfGiven);
  v.field("attention_keeps_probabilities", p.attention_keeps_probabilities);
  number(v, "ranks_per_core", p.ranks_per_core, Rule::PositiveIfGiven);
  number(v, "overlap_cost", p.overlap_cost, Rule::AtLeastZeroIfGiven);
  number(v, "collective_wait", p.collective_wait, Rule::AtLeastZeroIfGiven);
  auto link_class = [&](const char* key, Link& link) {
    if constexpr (std::is_same_v<V, Reader>)
      if (!v.raw(key))
        v.fail(key, "missing: an object {\"bandwidth\": bytes/s, \"latency\": seconds}");
    v.object(key, [&](auto& s) { visit(s, link); });
  };
  link_class("intra_node", p.intra_node);
  link_class("inter_node", p.inter_node);
  v.field("gpus_per_node", p.gpus_per_node);
}

}  // namespace

const char* to_string(Collective c) {
  switch (c) {
    case Collective::AllReduce:
      return "all_reduce";
    case Collective::AllGather:
      return "all_gather";
    case Collective::ReduceScatter:
      return "reduce_scatter";
    case Collective::AllToAll:
      return "all_to_all";
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
  const auto j = json_schema::parse(text, "device profile", source);
  VESCALE_CHECK(j.is_object(), "device profile '", source, "': the top level must be an object");
  DeviceProfile p;
  p.name = std::filesystem::path(source).stem().string();
  p.gpus_per_node = 0;  // required: visit reads it, the check below names it when absent
  Reader r(j, "", source, "device profile");
  visit(r, p);
  if (!(p.gemm_efficiency <= 1)) r.fail("gemm_efficiency", "a fraction of the peak, at most 1");
  if (!(p.overlap_cost <= 1))
    r.fail("overlap_cost", "a fraction of the overlapped time, at most 1");
  if (p.gpus_per_node < 1) r.fail("gpus_per_node", "must be a positive integer (devices per node)");
  // Where each figure comes from: free text, kept as it is.
  if (const auto* sources = r.raw("sources"); sources && sources->is_object())
    for (const auto& [k, v] : sources->items())
      if (v.is_string()) p.sources[k] = v.get<std::string>();
  r.finish();
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
  Writer w;
  DeviceProfile copy = p;  // visit takes the profile as the Reader fills it
  visit(w, copy);
  w.field("sources", p.sources);
  return w.node.dump(2);
}

}  // namespace vescale::planner
