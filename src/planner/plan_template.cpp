#include "vescale/planner/plan_template.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "vescale/common/check.h"
#include "vescale/plan/parallel_dims.h"
#include "vescale/train/shipped_files.h"

namespace vescale::planner {
namespace {

// Ordered: a plan's patterns match first to last, so "*" must stay after the named ones.
using json = nlohmann::ordered_json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  VESCALE_CHECK(in.good(), "plan template: cannot open '", path, "'");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    VESCALE_FAIL("plan template '", path, "': not valid JSON: ", e.what());
  }
}

bool is_data(const std::string& dim) { return dim == plan::kDataDim || dim == plan::kExpertDim; }

// A boundary's per-dim placements: data dims split the batch, tp takes the template's.
json boundary(const std::vector<std::string>& dims, const std::string& tp) {
  json out = json::array();
  for (const auto& d : dims) out.push_back(d == plan::kTensorDim ? tp : is_data(d) ? "Shard(0)" : "Replicate");
  return out;
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> layout_mesh(const Layout& l) {
  std::vector<std::pair<std::string, int64_t>> mesh;
  for (const auto& [name, size] : std::vector<std::pair<std::string, int64_t>>{
           {"pp", l.pp}, {plan::kDataDim, l.dp}, {plan::kExpertDim, l.ep}, {plan::kTensorDim, l.tp}})
    if (size > 1) mesh.push_back({name, size});
  if (mesh.empty()) mesh.push_back({plan::kDataDim, 1});
  return mesh;
}

std::string plan_template_path(const std::string& type) {
  const std::string path = train::shipped_dir("configs") + "/plans/templates/" + type + ".json";
  VESCALE_CHECK(std::filesystem::is_regular_file(path), "vescale-plan: model.type '", type,
                "' has no plan template (", path, "); --write needs one, see docs/planner.md");
  return path;
}

bool template_has_sequence_parallel(const std::string& template_path) {
  return read_json(template_path).contains("forward_sp");
}

std::string plan_for_layout(const std::string& template_path, const Layout& l,
                            int64_t microbatches) {
  const json t = read_json(template_path);
  // The plan's mesh: the stage's dims (the pipeline dim is the plan's "pipeline" section).
  std::vector<std::string> dims;
  for (const auto& [name, size] : layout_mesh(l))
    if (name != "pp" && size > 1) dims.push_back(name);
  if (dims.empty() && l.pp == 1) dims.push_back(plan::kDataDim);  // one device: a dp of 1
  json plan;
  plan["comment"] = "Made by vescale-plan --write from " + template_path + " for " + l.describe();
  plan["mesh"] = dims;
  if (t.contains("optional")) plan["optional"] = t["optional"];
  // A pure pipeline (no other dim) keeps every weight whole on its stage: no params section.
  if (!dims.empty()) {
    json params = json::object();
    for (const auto& [pattern, roles] : t.at("params").items()) {
      json p = json::array();
      for (const auto& d : dims) p.push_back(roles.value(d, std::string("Replicate")));
      params[pattern] = p;
    }
    params["*"] = json(std::vector<std::string>(dims.size(), "Replicate"));
    plan["params"] = params;
  }
  if (l.tp > 1) {
    const bool sp = l.sequence_parallel;
    VESCALE_CHECK(!sp || t.contains("forward_sp"), "plan template '", template_path,
                  "' has no sequence-parallel rules (forward_sp); plan without sp");
    json forward = json::object();
    for (const auto& [module, io] : t.at(sp ? "forward_sp" : "forward").items()) {
      json entry = json::object();
      for (const auto& side : {"input", "output"})
        if (io.contains(side)) {
          entry[side] = json::array();
          for (const auto& tp : io[side]) entry[side].push_back(boundary(dims, tp.get<std::string>()));
        }
      forward[module] = entry;
    }
    plan["forward"] = forward;
  }
  if (l.ep > 1) {
    VESCALE_CHECK(t.contains("experts"), "plan template '", template_path,
                  "' names no experts module; the model has no experts to place on ep");
    plan["moe"] = {{t["experts"].get<std::string>(), {{"ep", plan::kExpertDim}}}};
  }
  std::vector<std::string> data;
  for (const auto& d : dims)
    if (is_data(d)) data.push_back(d);
  if (!data.empty()) plan["grad_reduce"] = {{"dims", data}};
  if (l.pp > 1) {
    plan["pipeline"] = {{"dim", "pp"},
                        {"schedule", plan::to_string(l.schedule)},
                        {"microbatches", microbatches},
                        {"chunks", l.chunks},
                        {"split", "even"}};
  }
  return plan.dump(2);
}

std::string config_for_layout(const train::Config& config, const Layout& l, int64_t global_batch,
                              const std::string& plan_path) {
  // The config's own order (ordered_json), so the mesh keeps its dims' order.
  nlohmann::ordered_json c = nlohmann::ordered_json::parse(config.to_json());
  nlohmann::ordered_json mesh = nlohmann::ordered_json::object();
  for (const auto& [name, size] : layout_mesh(l)) mesh[name] = size;
  c["parallel"]["mesh"] = mesh;
  c["parallel"]["plan"] = plan_path;
  c["parallel"]["zero"] = l.zero;
  c["parallel"]["reduce_dtype"] = l.bf16_reduce ? "bf16" : "fp32";
  c["parallel"].erase("pipeline");
  c["train"]["activation_checkpointing"] = l.checkpointing;
  c["train"]["batch_size"] = l.micro_batch;
  c["train"]["micro_batch_size"] = l.micro_batch;
  c["train"]["global_batch_size"] = global_batch;
  c["train"]["grad_accum"] = 1;
  return c.dump(2);
}

}  // namespace vescale::planner
