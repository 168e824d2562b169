// Each collective against values computed by hand from the rank and the world size, on the
// world's device (cuda under VESCALE_TEST_DEVICE=cuda: NCCL, or Gloo over CUDA tensors).
#include <catch2/catch.hpp>

#include "vescale/common/check.h"
#include "vescale/dist/world.h"

using namespace vescale::dist;

namespace {
at::Tensor on(const at::Tensor& t) { return t.to(at::Device(device_string())); }
at::Tensor f32(std::vector<float> v) { return on(at::tensor(v, at::kFloat)); }
}  // namespace

TEST_CASE("all_reduce sum/avg/max/min/product", "[any]") {
  auto& g = world();
  const int r = g.rank(), w = g.size();
  const float s = w * (w + 1) / 2.0f;  // 1 + 2 + ... + w
  float fact = 1;
  for (int i = 2; i <= w; ++i) fact *= i;

  auto t = f32({float(r + 1), float(2 * (r + 1))});
  g.all_reduce(t).wait();
  CHECK(at::equal(t, f32({s, 2 * s})));

  t = f32({float(r + 1)});
  g.all_reduce(t, ReduceOp::Avg).wait();
  CHECK(t.item<float>() == Approx(s / w));

  t = f32({float(r + 1), float(-r)});
  g.all_reduce(t, ReduceOp::Max).wait();
  CHECK(at::equal(t, f32({float(w), 0.0f})));

  t = f32({float(r + 1), float(-r)});
  g.all_reduce(t, ReduceOp::Min).wait();
  CHECK(at::equal(t, f32({1.0f, float(-(w - 1))})));

  t = f32({float(r + 1)});
  g.all_reduce(t, ReduceOp::Product).wait();
  CHECK(t.item<float>() == fact);

  auto i = on(at::full({3}, int64_t(r), at::kLong));
  g.all_reduce(i).wait();
  CHECK(i[2].item<int64_t>() == int64_t(w) * (w - 1) / 2);
}

TEST_CASE("all_gather even pieces in rank order", "[any]") {
  auto& g = world();
  const int r = g.rank(), w = g.size();
  auto in = on(at::full({2, 3}, float(r)));
  auto out = on(at::empty({2 * w, 3}));
  g.all_gather(out, in).wait();
  for (int q = 0; q < w; ++q)
    CHECK(at::equal(out.narrow(0, 2 * q, 2), on(at::full({2, 3}, float(q)))));
}

TEST_CASE("all_gather uneven pieces, including empty ones", "[any]") {
  auto& g = world();
  const int r = g.rank(), w = g.size();
  std::vector<int64_t> sizes(w);
  for (int q = 0; q < w; ++q) sizes[q] = (2 * q + 1) % 3;  // 1, 0, 2, 1, ...
  // rank q's rows hold 10q + row
  auto in =
      (on(at::arange(sizes[r], at::kFloat)) + 10.0f * r).unsqueeze(1).repeat({1, 2}).contiguous();
  int64_t total = 0;
  for (auto s : sizes) total += s;
  auto out = on(at::empty({total, 2}));
  g.all_gather_uneven(out, in, sizes).wait();
  int64_t row = 0;
  for (int q = 0; q < w; ++q)
    for (int64_t k = 0; k < sizes[q]; ++k, ++row) {
      CHECK(out[row][0].item<float>() == 10.0f * q + k);
      CHECK(out[row][1].item<float>() == 10.0f * q + k);
    }
  CHECK(row == total);
}

TEST_CASE("reduce_scatter sum and avg", "[any]") {
  auto& g = world();
  const int r = g.rank(), w = g.size();
  // rank q contributes element j = j + 100q; rank r receives elements 2r, 2r+1 summed over q.
  auto in = on(at::arange(2 * w, at::kFloat)) + 100.0f * r;
  auto out = on(at::empty({2}));
  g.reduce_scatter(out, in).wait();
  const float hundreds = 100.0f * w * (w - 1) / 2;
  CHECK(at::equal(out, f32({w * float(2 * r) + hundreds, w * float(2 * r + 1) + hundreds})));
  g.reduce_scatter(out, in, ReduceOp::Avg).wait();
  CHECK(out[0].item<float>() == Approx(float(2 * r) + hundreds / w));
}

TEST_CASE("all_to_all with even splits", "[any]") {
  auto& g = world();
  const int r = g.rank(), w = g.size();
  auto in = on(at::arange(w, at::kFloat)) + 100.0f * r;  // row j goes to rank j
  auto out = on(at::empty({w}));
  g.all_to_all(out, in).wait();
  for (int q = 0; q < w; ++q) CHECK(out[q].item<float>() == 100.0f * q + r);
}

TEST_CASE("all_to_all with uneven splits", "[any]") {
  auto& g = world();
  const int r = g.rank(), w = g.size();
  // rank r sends j+1 rows to rank j, valued 1000r + 10j + k; so it receives r+1 rows from each q.
  std::vector<int64_t> in_splits(w), out_splits(w, r + 1);
  std::vector<float> vals;
  for (int j = 0; j < w; ++j) {
    in_splits[j] = j + 1;
    for (int k = 0; k <= j; ++k) vals.push_back(1000.0f * r + 10.0f * j + k);
  }
  auto in = f32(vals);
  auto out = on(at::empty({int64_t(w) * (r + 1)}));
  g.all_to_all(out, in, out_splits, in_splits).wait();
  int64_t row = 0;
  for (int q = 0; q < w; ++q)
    for (int k = 0; k <= r; ++k, ++row)
      CHECK(out[row].item<float>() == 1000.0f * q + 10.0f * r + k);
}

TEST_CASE("broadcast from the last rank", "[any]") {
  auto& g = world();
  const int root = g.size() - 1;
  auto t = g.rank() == root ? on(at::arange(5, at::kFloat)) * 3 : on(at::zeros({5}));
  g.broadcast(t, root).wait();
  CHECK(at::equal(t, on(at::arange(5, at::kFloat)) * 3));
}

TEST_CASE("send and recv around a ring", "[world2][world4]") {
  auto& g = world();
  const int r = g.rank(), w = g.size();
  auto mine = on(at::full({4}, float(r)));
  auto got = on(at::empty({4}));
  auto s = g.send(mine, (r + 1) % w, 7);
  auto rv = g.recv(got, (r + w - 1) % w, 7);
  s.wait();
  rv.wait();
  CHECK(at::equal(got, on(at::full({4}, float((r + w - 1) % w)))));
}

TEST_CASE("barrier and async handles", "[any]") {
  auto& g = world();
  auto a = on(at::ones({8}));
  auto b = on(at::ones({8})) * 2;
  // Two collectives in flight at once, waited in order.
  Work wa = g.all_reduce(a);
  Work wb = g.all_reduce(b);
  wa.wait();
  wb.wait();
  CHECK(wa.is_completed());
  CHECK(at::equal(a, on(at::full({8}, float(g.size())))));
  CHECK(at::equal(b, on(at::full({8}, 2.0f * g.size()))));
  g.barrier().wait();
}

TEST_CASE("bad collective arguments are rejected before any communication", "[any]") {
  using Catch::Matchers::Contains;
  auto& g = world();
  auto nc = on(at::ones({4, 4})).t();
  CHECK_THROWS_WITH(g.all_reduce(nc), Contains("must be contiguous"));
  CHECK_THROWS_WITH(g.all_gather(on(at::empty({3})), on(at::ones({2}))),
                    Contains("does not fit input shape"));
  CHECK_THROWS_WITH(g.all_to_all(on(at::empty({g.size()})), on(at::ones({g.size()})),
                                 std::vector<int64_t>(g.size() + 1, 0), {}),
                    Contains("one per rank"));
  CHECK_THROWS_WITH(g.all_reduce(on(at::ones({2}, at::kLong)), ReduceOp::Avg),
                    Contains("avg needs a floating-point"));
  CHECK_THROWS_WITH(g.broadcast(on(at::ones({1})), g.size()), Contains("is not a group rank"));
}

TEST_CASE("collective_stats counts each issued collective once, by kind", "[any]") {
  auto& g = world();
  const auto before = collective_stats();
  auto t = on(at::ones({4}));
  g.all_reduce(t).wait();
  g.all_reduce(t).wait();
  auto gathered = on(at::empty({2 * g.size()}));
  g.all_gather(gathered, on(at::ones({2}))).wait();
  std::vector<int64_t> rows(g.size(), 1);
  g.all_gather_uneven(on(at::empty({g.size()})), on(at::ones({1})), rows)
      .wait();  // one gather underneath
  g.reduce_scatter(on(at::empty({1})), on(at::ones({g.size()}))).wait();
  g.broadcast(t, 0).wait();
  g.barrier().wait();  // not a collective of data
  const auto after = collective_stats();
  CHECK(after.all_reduce - before.all_reduce == 2);
  CHECK(after.all_gather - before.all_gather == 2);
  CHECK(after.reduce_scatter - before.reduce_scatter == 1);
  CHECK(after.broadcast - before.broadcast == 1);
  CHECK(after.all_to_all == before.all_to_all);
  CHECK(after.total() - before.total() == 6);
}
