// grouped_mm (vescale/kernels/grouped_mm.h).
#include "vescale/kernels/grouped_mm.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include "vescale/common/check.h"

namespace vescale::kernels {
namespace {

// out[rows of e] = a[rows of e] b[e]^T (b_transposed) or a[rows of e] b[e], one mm_out per group.
void grouped_into(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                  const std::vector<int64_t>& counts, bool b_transposed) {
  int64_t start = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    const int64_t n = counts[e];
    if (n == 0) continue;
    auto be = b[static_cast<int64_t>(e)];
    auto slice = out.narrow(0, start, n);
    at::mm_out(slice, a.narrow(0, start, n), b_transposed ? be.t() : be);
    start += n;
  }
}

struct GroupedMm : torch::autograd::Function<GroupedMm> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& w, const std::vector<int64_t>& counts) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["counts"] = c10::IValue(counts);
    at::Tensor y = at::empty({x.size(0), w.size(1)}, x.options());
    grouped_into(y, x, w, counts, /*b_transposed=*/true);
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const auto counts = ctx->saved_data["counts"].toIntVector();
    const at::Tensor g = grads[0].contiguous();
    at::Tensor gx, gw;
    if (ctx->needs_input_grad(0)) {
      gx = at::empty_like(x);
      grouped_into(gx, g, w, counts, /*b_transposed=*/false);
    }
    if (ctx->needs_input_grad(1)) {
      gw = at::zeros_like(w);  // an expert without rows gets a zero gradient
      int64_t start = 0;
      for (size_t e = 0; e < counts.size(); ++e) {
        const int64_t n = counts[e];
        if (n == 0) continue;
        auto slot = gw[static_cast<int64_t>(e)];
        at::mm_out(slot, g.narrow(0, start, n).t(), x.narrow(0, start, n));
        start += n;
      }
    }
    return {gx, gw, at::Tensor()};
  }
};

}  // namespace

at::Tensor grouped_mm(const at::Tensor& x_in, const at::Tensor& w_in,
                      const std::vector<int64_t>& counts) {
  // Under autocast a custom op is not cast for us: run in the autocast dtype, as linear does.
  at::Tensor x = x_in, w = w_in;
  const auto device = x.device().type();
  if ((device == at::kCPU || device == at::kCUDA) && at::autocast::is_autocast_enabled(device)) {
    const auto dtype = at::autocast::get_autocast_dtype(device);
    x = x.to(dtype), w = w.to(dtype);
  }
  VESCALE_CHECK(x.dim() == 2 && w.dim() == 3, "grouped_mm: x must be [M, in] and w [E, out, in]; got ",
                x.sizes(), " and ", w.sizes());
  VESCALE_CHECK(static_cast<int64_t>(counts.size()) == w.size(0), "grouped_mm: ", counts.size(),
                " group sizes for ", w.size(0), " weight matrices");
  VESCALE_CHECK(x.size(1) == w.size(2), "grouped_mm: x has ", x.size(1), " columns but w expects ",
                w.size(2));
  int64_t rows = 0;
  for (int64_t c : counts) {
    VESCALE_CHECK(c >= 0, "grouped_mm: a negative group size (", c, ")");
    rows += c;
  }
  VESCALE_CHECK(rows == x.size(0), "grouped_mm: the group sizes add up to ", rows, " but x has ",
                x.size(0), " rows");
  if (x.is_cuda() && x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16 &&
      x.size(0) > 0) {
    // Hopper's grouped GEMM: offsets are the groups' running ends (int32), autograd included.
    std::vector<int32_t> ends;
    int64_t end = 0;
    for (int64_t c : counts) ends.push_back(static_cast<int32_t>(end += c));
    auto offs = at::tensor(ends, at::TensorOptions().dtype(at::kInt)).to(x.device(), true);
    return at::_grouped_mm(x, w.transpose(-2, -1), offs);
  }
  return GroupedMm::apply(x, w, counts);
}

}  // namespace vescale::kernels
