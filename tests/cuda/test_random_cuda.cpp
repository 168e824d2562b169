// The Philox CUDA kernel (src/random/kernels_cuda.cu) against the CPU kernel, bit for bit: every
// distribution, fp32 and bf16 (and fp64), regions of a global tensor whose rows start and end
// mid-block (a DTensor shard is such a region), and the public fills and dropout on CUDA tensors
// against the same calls on CPU tensors. The CPU result is the reference (tests/random/ checks
// it against the per-element formula).
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "random/fill_regions.h"
#include "vescale/random/philox.h"
#include "vescale/random/random.h"

using namespace vescale::random;
using vescale::testing::same_bits;

extern void vescale_test_fill_region(at::Tensor&, const std::vector<int64_t>&,
                                     const std::vector<int64_t>&, uint64_t, uint64_t,
                                     const DistParams&);

namespace {

const std::vector<DistParams>& dists() {
  static const std::vector<DistParams> d = {
      {Dist::Uniform, -3.0, 5.0},
      {Dist::Normal, 1.5, 0.3},
      {Dist::Bernoulli, 0.3, 0.0},
      {Dist::RandInt, -7.0, 1000.0},
      {Dist::TruncNormal, 0.0, 1.0, 0.02275013194817921, 0.9772498680518208, -2.0, 2.0},
  };
  return d;
}

at::Tensor fill(const std::vector<int64_t>& global, const std::vector<int64_t>& local,
                const std::vector<int64_t>& offset, uint64_t base, const DistParams& p,
                at::ScalarType dtype, at::Device device) {
  at::Tensor out = at::empty(local, at::TensorOptions(dtype).device(device));
  vescale_test_fill_region(out, global, offset, 0x9e3779b97f4a7c15ull, base, p);
  return out;
}

const at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16, at::kDouble};

}  // namespace

TEST_CASE("the CUDA kernel fills every region like the CPU kernel, bit for bit", "[random]") {
  const auto& regions = vescale::testing::fill_regions();
  // The CPU half: the references exist and are not all one value.
  const at::Tensor probe = fill({1000}, {1000}, {0}, 0, dists()[1], at::kFloat, at::kCPU);
  REQUIRE(probe.std().item<double>() > 0.1);
  VESCALE_GPU_HALF();
  for (const auto& p : dists())
    for (const auto& r : regions)
      for (uint64_t base : {uint64_t{0}, uint64_t{3}, (uint64_t{1} << 33) + 1})
        for (auto dtype : kDtypes) {
          INFO("dist " << static_cast<int>(p.dist) << " local " << c10::IntArrayRef(r.local)
                       << " offset " << c10::IntArrayRef(r.offset) << " base " << base << " dtype "
                       << dtype);
          const at::Tensor cpu = fill(r.global, r.local, r.offset, base, p, dtype, at::kCPU);
          const at::Tensor gpu = fill(r.global, r.local, r.offset, base, p, dtype, at::kCUDA);
          CHECK(gpu.is_cuda());
          CHECK(same_bits(gpu, cpu));
        }
}

TEST_CASE("DTensor shards filled on CUDA are the slices of the whole tensor filled on the CPU",
          "[random]") {
  // Shard(0) and Shard(1) of a 37 x 129 tensor over 4 ranks (uneven: 10, 10, 10, 7 rows), and
  // a 2x2 mesh's Shard(0), Shard(1) blocks: each rank's local region at its offset.
  const std::vector<int64_t> global{37, 129};
  struct Shard {
    std::vector<int64_t> local, offset;
  };
  std::vector<Shard> shards;
  for (int64_t r = 0; r < 4; ++r) {
    shards.push_back({{r < 3 ? 10 : 7, 129}, {10 * r, 0}});
    shards.push_back({{37, r < 3 ? 33 : 30}, {0, 33 * r}});
  }
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 2; ++b)
      shards.push_back({{a == 0 ? 19 : 18, b == 0 ? 65 : 64}, {19 * a, 65 * b}});
  const uint64_t base = 11;
  for (const auto& p : dists())
    for (auto dtype : kDtypes) {
      const at::Tensor whole = fill(global, global, {0, 0}, base, p, dtype, at::kCPU);
      // The CPU half: a CPU shard is its slice too.
      const auto& s0 = shards[0];
      CHECK(same_bits(fill(global, s0.local, s0.offset, base, p, dtype, at::kCPU),
                      whole.narrow(0, 0, s0.local[0])));
      if (!vescale::testing::gpu_visible()) continue;
      for (const auto& s : shards) {
        INFO("dist " << static_cast<int>(p.dist) << " dtype " << dtype << " shard "
                     << c10::IntArrayRef(s.local) << " at " << c10::IntArrayRef(s.offset));
        const at::Tensor gpu = fill(global, s.local, s.offset, base, p, dtype, at::kCUDA);
        CHECK(same_bits(
            gpu, whole.narrow(0, s.offset[0], s.local[0]).narrow(1, s.offset[1], s.local[1])));
      }
    }
}

TEST_CASE("the public fills and dropout give CUDA tensors the CPU tensors' bits", "[random]") {
  using Fn = std::function<at::Tensor(at::Tensor&)>;
  const std::vector<std::pair<std::string, Fn>> fills = {
      {"uniform_", [](at::Tensor& t) { return uniform_(t, -2.0, 5.0); }},
      {"normal_", [](at::Tensor& t) { return normal_(t, 0.5, 3.0); }},
      {"bernoulli_", [](at::Tensor& t) { return bernoulli_(t, 0.25); }},
      {"randint_", [](at::Tensor& t) { return randint_(t, -5, 1000); }},
      {"trunc_normal_", [](at::Tensor& t) { return trunc_normal_(t, 0.0, 0.02, -0.04, 0.04); }},
      {"kaiming_uniform_", [](at::Tensor& t) { return kaiming_uniform_(t); }},
      {"xavier_uniform_", [](at::Tensor& t) { return xavier_uniform_(t, 1.3); }},
  };
  for (auto dtype : {at::kFloat, at::kBFloat16})
    for (const auto& [name, fn] : fills) {
      INFO(name << " " << dtype);
      manual_seed(7);
      at::Tensor cpu = at::zeros({301, 37}, dtype);
      fn(cpu);
      const State after = get_state();
      CHECK(after.offset == (301 * 37 + 3) / 4);
      if (!vescale::testing::gpu_visible()) continue;
      manual_seed(7);
      at::Tensor gpu = at::zeros({301, 37}, at::TensorOptions(dtype).device(at::kCUDA));
      fn(gpu);
      CHECK(get_state().offset == after.offset);
      CHECK(same_bits(gpu, cpu));
    }

  // dropout: the same mask and scale in forward, the same gradient in backward.
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    INFO("dropout " << dtype);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    const at::Tensor x = at::randn({129, 33}, gen, at::kFloat).to(dtype);
    manual_seed(5);
    at::Tensor xc = x.clone().requires_grad_(true);
    at::Tensor yc = dropout(xc, 0.3);
    yc.sum().backward();
    CHECK(yc.eq(0).sum().item<int64_t>() > 0);
    if (!vescale::testing::gpu_visible()) continue;
    manual_seed(5);
    at::Tensor xg = x.cuda().requires_grad_(true);
    at::Tensor yg = dropout(xg, 0.3);
    yg.sum().backward();
    CHECK(same_bits(yg.detach(), yc.detach()));
    CHECK(same_bits(xg.grad(), xc.grad()));
  }
}
