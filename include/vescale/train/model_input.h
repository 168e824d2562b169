// The batch as a model sees it on a mesh: what the trainer feeds its model, and what
// vescale-plan --calibrate feeds the blocks it times (as training runs them).
#pragma once
#include <ATen/core/Tensor.h>

#include "vescale/mesh/device_mesh.h"

namespace vescale::train {

// This rank's [batch, seq_len] token block as the model's input on `mesh` (null: none): rows
// split over its data dims (the loader gave each data rank its own rows), replicated over the
// rest. With `positions` (context parallelism: this rank's tokens of each sequence), only those
// columns, which the model's mesh (cp joined to dp) takes as rows of their own. Not collective.
at::Tensor to_model_input(const at::Tensor& local_tokens, const mesh::DeviceMesh* mesh,
                          const at::Tensor& positions = {});

}  // namespace vescale::train
