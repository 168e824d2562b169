// embedding(weight, indices, ...) and its dense backward. A vocab-sharded table (Shard(0))
// looks up only the ids in its row range and gives a Partial(sum) output; a table sharded
// along the embedding dim gives an output sharded along its last dim; sharded ids give a
// matching shard of the output.
#include <ATen/ATen.h>

#include "dtensor/propagation.h"
#include "dtensor/rules/rule_utils.h"
#include "vescale/common/check.h"

namespace vescale::dtensor {

namespace {

Strategy embedding(const OpCall& call) {
  const auto& w = call.specs[0];
  const auto& ids = call.specs[1];
  const int64_t nm = call.mesh_ndim(), out_nd = ids.ndim() + 1;
  Strategy st;
  Placements wp = w.placements, ip = ids.placements, out(nm, Placement::replicate());
  bool vocab = false;
  for (int64_t m = 0; m < nm; ++m) {
    if (ip[m].is_partial()) ip[m] = Placement::replicate();
    if (wp[m].is_shard(0) && w.mesh_dims_sharding(0).size() == 1) {
      ip[m] = Placement::replicate();  // every rank needs every id
      out[m] = Placement::partial();
      vocab = true;
    } else if (wp[m].is_shard(1)) {
      ip[m] = Placement::replicate();
      out[m] = Placement::shard(out_nd - 1);
    } else if (wp[m].is_partial()) {
      ip[m] = Placement::replicate();
      out[m] = wp[m];
    } else {
      wp[m] = Placement::replicate();
      if (ip[m].is_shard()) out[m] = ip[m];
    }
  }
  st.inputs = {wp, ip};
  st.outputs = {out};
  auto shape = ids.shape;
  shape.push_back(w.shape[1]);
  st.output_shapes = {shape};
  if (vocab) {
    DTensorSpec local_view{w.mesh, wp, w.shape, w.dtype};
    const int64_t row0 = local_view.local_offset()[0], rows = local_view.local_shape()[0];
    const size_t n_args = call.op.schema().arguments().size();
    st.local_fn = [row0, rows, n_args](torch::jit::Stack& stack) {
      auto a = torch::jit::last(stack, n_args);
      at::Tensor table = a[0].toTensor(), idx = a[1].toTensor();
      const int64_t padding_idx = a[2].toInt();
      torch::jit::drop(stack, n_args);
      at::Tensor mine = (idx >= row0) & (idx < row0 + rows);
      if (padding_idx >= 0) mine &= idx != padding_idx;
      at::Tensor local_idx = at::where(mine, idx - row0, at::zeros_like(idx));
      auto shape = idx.sizes().vec();
      shape.push_back(table.size(1));
      at::Tensor out =
          rows > 0 ? at::embedding(table, local_idx) : at::zeros(shape, table.options());
      stack.emplace_back(out * mine.unsqueeze(-1).to(out.scalar_type()));
    };
  }
  return st;
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq).
Strategy embedding_backward(const OpCall& call) {
  const auto& g = call.specs[0];
  const auto& ids = call.specs[1];
  const int64_t nm = call.mesh_ndim();
  Placements gp = g.placements, ip = ids.placements, out(nm, Placement::replicate());
  for (int64_t m = 0; m < nm; ++m) {
    if (gp[m].is_shard(g.ndim() - 1)) {
      ip[m] = Placement::replicate();
      out[m] = Placement::shard(1);
    } else if (gp[m].is_shard() && ip[m] == gp[m]) {
      out[m] = Placement::partial();  // each rank's ids add into the whole table
    } else if (gp[m].is_partial()) {
      ip[m] = Placement::replicate();
      out[m] = Placement::partial();
    } else {
      gp[m] = Placement::replicate();
      ip[m] = Placement::replicate();
    }
  }
  Strategy st;
  st.inputs = {gp, ip};
  st.outputs = {out};
  st.output_shapes = {{call.arg("num_weights").toInt(), g.shape.back()}};
  return st;
}

}  // namespace

void register_embedding_rules() {
  register_rule("aten::embedding", embedding);
  register_rule("aten::embedding_dense_backward", embedding_backward);
}

}  // namespace vescale::dtensor
