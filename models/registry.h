// The model registry: what the framework knows of a model family, registered from the family's
// own folder (models/<family>/). Adding a model is its folder and its lines in
// models/CMakeLists.txt: an options file (the struct, its model.* JSON fields and checks) and a
// spec file (<family>_spec.cpp: the module, FLOPs, the transformer blocks, the Hugging Face
// name table, the shipped plans). The options half is plain C++ (the train config and its fuzzer read it without
// libtorch); the spec half (ModelSpec) is in models/model.h.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "vescale/common/check.h"

namespace vescale::json_schema {
class Reader;  // vescale/common/json_schema.h
class Writer;
}  // namespace vescale::json_schema

namespace vescale::models {

// What one transformer block's forward keeps for its backward, per token, in elements (the
// activation memory of the dry run and the planner): tensors of the residual width outside the
// tensor-parallel region (norm inputs and normalized inputs: split only by sequence
// parallelism), those the tensor-parallel region's first GEMMs keep as their input (the norms'
// outputs: whole even under sequence parallelism, which gathers them first), tensors inside it
// (projections' outputs, feed-forward intermediates: split by tp), and the query heads
// whose probabilities an attention kernel keeps for each key (our CPU kernel; flash attention
// keeps none). Beside them, what the block's backward holds at once: the output's gradient
// (residual width) and an intermediate's gradient (tensor-parallel), before the saved tensors
// they replace are freed; about a tenth of the activations, where counting a second block's
// activations, as the planner did, overstated a checkpointed rank's peak by up to a fifth.
// Under a split backward (zb_h1) the GEMMs that defer their weight gradient to W
// (kernels::linear) keep their input and output gradient until it runs: about
// `split_weight_tensor_parallel` per token (the experts' grouped GEMMs do not defer theirs).
// Counted in each family's block; tests/train/test_block_activations.cpp checks the counts
// against the counting allocator.
struct BlockActivations {
  double replicated = 0, gathered = 0, tensor_parallel = 0, attention_heads = 0;
  double backward_replicated = 0, backward_tensor_parallel = 0;
  double split_weight_tensor_parallel = 0;
};

// One family's options, type-erased: the train config holds them without knowing the family.
class ModelOptions {
 public:
  virtual ~ModelOptions() = default;
  virtual const std::string& type() const = 0;  // "gpt", "llama", ...: model.type
  virtual std::unique_ptr<ModelOptions> clone() const = 0;
  // The model.* fields other than "type", read and checked for type, or written back.
  virtual void read(vescale::json_schema::Reader& r) = 0;
  virtual void write(vescale::json_schema::Writer& w) const = 0;
  // Checks of the values beyond their types: calls fail(field, message) for the first bad one
  // (the config throws naming model.<field>).
  using Fail = std::function<void(const std::string& field, const std::string& message)>;
  virtual void validate(const Fail& fail) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_seq_len() const = 0;
  virtual int64_t n_layers() const = 0;
  virtual int64_t dim() const = 0;  // the residual width
  virtual int64_t n_heads() const = 0;  // attention's query heads

  // The options struct itself (GPTOptions, LlamaOptions, ...), or an error naming both types.
  template <class T>
  const T& as() const {
    const void* p = get(typeid(T));
    VESCALE_CHECK(p, "model options: model.type '", type(), "' does not have ", typeid(T).name());
    return *static_cast<const T*>(p);
  }
  template <class T>
  T& as() {
    return const_cast<T&>(static_cast<const ModelOptions*>(this)->as<T>());
  }

 protected:
  virtual const void* get(const std::type_info& t) const = 0;
};

struct ModelFamily {
  std::string type;
  std::function<std::unique_ptr<ModelOptions>()> defaults;  // the family's default options
  // A Hugging Face config.json (its text, its path) as model.* fields, (field, JSON value):
  // shared/hf_config.h. Empty for a family without a Hugging Face counterpart.
  std::function<std::vector<std::pair<std::string, std::string>>(const std::string&,
                                                                 const std::string&)>
      from_hf_config;
  // The other way: a config.json for transformers from these options, the weights stored as
  // the given torch dtype ("float32", "bfloat16").
  std::function<std::string(const ModelOptions&, const std::string&)> to_hf_config;
};

// Called by each family's options file at load time.
void register_family(ModelFamily family);
// The family of model.type `type`, or null.
const ModelFamily* find_family(const std::string& type);
// "'bert' is not one of gpt, llama, mixtral" (with a guess when one is close).
std::string unknown_type_message(const std::string& type);
std::vector<std::string> family_types();  // registered, sorted

// The default options of a registered family; throws naming model.type when it is unknown.
std::unique_ptr<ModelOptions> default_options(const std::string& type);

}  // namespace vescale::models
