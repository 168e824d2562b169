// The roles of a mesh's dims, derived once from the mesh and the plan, so no other code
// compares dim names: which dims split the batch (dp, and ep, whose ranks hold other tokens:
// docs/moe.md), which one is data parallelism proper (dp: gradient reduction, ZeRO), which
// shards the weights (tp), which cuts the layers into stages (the plan's pipeline dim), which
// splits each sequence (the context dim: docs/context_parallel.md).
// Plain C++: the dry run, the trainer, the reducer and the tests read it.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace vescale::mesh {
class MeshShape;
}

namespace vescale::plan {

class Plan;

// The conventional names (docs/plan.md): a config's mesh and a plan's dims use them.
inline constexpr const char* kDataDim = "dp";
inline constexpr const char* kTensorDim = "tp";
inline constexpr const char* kExpertDim = "ep";

struct ParallelDims {
  // `dims`: the mesh in order (name, size); `plan` may be null (no plan: every weight whole).
  ParallelDims(std::vector<std::pair<std::string, int64_t>> dims, const Plan* plan);
  ParallelDims(const mesh::MeshShape& mesh, const Plan* plan);

  std::vector<std::pair<std::string, int64_t>> dims;
  std::vector<std::string> data;  // the dims that split the batch, in mesh order
  std::string pipeline;           // the plan's pipeline dim, "" without one
  // The dim that splits sequences: the plan's context dim, or "cp" when the mesh has one; ""
  // without. Not a data dim: every cp rank of a data rank reads the same sequences.
  std::string context;

  // A dim's size, 1 when the mesh has no such dim.
  int64_t size(const std::string& dim) const;
  int64_t dp() const { return size(kDataDim); }
  int64_t tp() const { return size(kTensorDim); }
  int64_t pp() const { return pipeline.empty() ? 1 : size(pipeline); }
  int64_t cp() const { return context.empty() ? 1 : size(context); }
  // Ranks that see other sequences: the product of the data dims.
  int64_t data_size() const;
  bool is_data(const std::string& dim) const;
  // The dims of a pipeline stage's model: model_dims() but the pipeline dim.
  std::vector<std::pair<std::string, int64_t>> stage_dims() const;
  // The dims of the mesh the model is laid out on: the context dim joined to dp (one dim "dp" of
  // dp x cp, Megatron's data-parallel-with-context group: parameters are replicated over cp and
  // their gradients reduced over both), or renamed dp when the mesh has none. The mesh itself
  // without a context dim. Throws unless the context dim follows dp in the mesh.
  std::vector<std::pair<std::string, int64_t>> model_dims() const;
};

}  // namespace vescale::plan
