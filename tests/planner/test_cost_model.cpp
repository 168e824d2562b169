// The planner's cost model against hand-computed values: collectives by the ring formulas,
// a block's activation bytes, FLOPs of a GEMM-only model, and a search whose best layout is
// known by hand.
#include <catch2/catch.hpp>

#include <cmath>

#include "vescale/common/check.h"
#include "vescale/planner/calibrate.h"
#include "vescale/planner/cost_model.h"
#include "vescale/planner/search.h"
#include "vescale/train/config.h"
#include "vescale/train/dry_run.h"

using namespace vescale::planner;
using vescale::train::Config;

namespace {
DeviceProfile toy_device() {
  DeviceProfile d;
  d.name = "toy";
  d.peak_flops = 100e12;
  d.memory_bytes = 80e9;
  d.memory_bandwidth = 2e12;
  d.gemm_efficiency = 0.5;
  d.gemm_half_work = 1e6;
  d.intra_node = {100e9, 1e-6};
  d.inter_node = {10e9, 10e-6};
  return d;
}

Config llama(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.type=\"llama\"", "model.n_layers=8", "model.dim=512",
                                  "model.n_heads=8", "model.n_kv_heads=8", "model.ffn_dim=2048",
                                  "model.vocab_size=1024", "model.max_seq_len=1024",
                                  "train.seq_len=1024", "train.dtype=\"bf16\""};
  all.insert(all.end(), sets.begin(), sets.end());
  return Config::from_json("{}", "t.json", all);
}
// 4 layers of 4 experts, top-2, width 256.
Config mixtral() {
  return Config::from_json("{}", "t.json",
                           {"model.type=\"mixtral\"", "model.n_layers=4", "model.dim=256",
                            "model.n_heads=8", "model.n_kv_heads=8", "model.ffn_dim=512",
                            "model.n_experts=4", "model.top_k=2", "model.vocab_size=512",
                            "model.max_seq_len=256", "train.seq_len=256", "train.dtype=\"bf16\""});
}
}  // namespace

TEST_CASE("collectives follow the ring formulas", "[planner]") {
  const Link link{100e9, 1e-6};
  // 8 ranks, 1 GB: all-reduce 2 x 7/8 x 1e9 / 1e11 + 14 us = 17.5 ms + 14 us.
  CHECK(all_reduce_s(1e9, 8, link) == Approx(0.0175 + 14e-6).epsilon(1e-12));
  CHECK(reduce_scatter_s(1e9, 8, link) == Approx(0.00875 + 7e-6).epsilon(1e-12));
  CHECK(all_gather_s(1e9, 8, link) == Approx(reduce_scatter_s(1e9, 8, link)));
  CHECK(all_to_all_s(4e8, 4, link) == Approx(0.75 * 4e8 / 1e11 + 3e-6).epsilon(1e-12));
  CHECK(p2p_s(1e6, link) == Approx(1e-5 + 1e-6).epsilon(1e-12));
  CHECK(all_reduce_s(1e9, 1, link) == 0);  // one rank: nothing to send
  // A collective measured on its own uses its own figures; the others keep the link's.
  Link measured = link;
  measured.measured[Collective::ReduceScatter] = {10e9, 100e-6};
  CHECK(reduce_scatter_s(1e9, 8, measured) ==
        Approx(7.0 / 8 * 1e9 / 1e10 + 7 * 100e-6).epsilon(1e-12));
  CHECK(all_gather_s(1e9, 8, measured) == Approx(all_gather_s(1e9, 8, link)));
}

TEST_CASE("a mesh dim stays within a node when it and the dims inside it fit", "[planner]") {
  const auto d = toy_device();
  Layout l;
  l.pp = 2, l.dp = 4, l.tp = 8;
  CHECK(&link_of(l, MeshDim::TP, d, 8) == &d.intra_node);  // 8 ranks: one node
  CHECK(&link_of(l, MeshDim::DP, d, 8) == &d.inter_node);  // dp x tp = 32 ranks
  CHECK(&link_of(l, MeshDim::PP, d, 8) == &d.inter_node);
  l.tp = 2, l.dp = 4;
  CHECK(&link_of(l, MeshDim::DP, d, 8) == &d.intra_node);  // 4 x 2 = 8
}

TEST_CASE("a block's activation bytes follow its family's count", "[planner]") {
  using vescale::train::block_activation_bytes;
  // Per token: 3072 residual-width elements, 10240 in the tensor-parallel region, 8 heads.
  const vescale::models::BlockActivations a{
      .replicated = 3072, .tensor_parallel = 10240, .attention_heads = 8};
  // s b = 1024 x 2, 16-bit, tp = 4: the residual-width part whole, the rest a quarter.
  CHECK(block_activation_bytes(a, 1024, 2, 4, false, false, false) == 2048.0 * (3072 + 2560) * 2);
  // Sequence parallelism splits the residual-width part too.
  CHECK(block_activation_bytes(a, 1024, 2, 4, true, false, false) == 2048.0 * (768 + 2560) * 2);
  // fp32, one rank, the probabilities kept: 8 heads x 1024 keys per token more.
  CHECK(block_activation_bytes(a, 1024, 2, 1, false, true, true) ==
        2048.0 * (3072 + 10240 + 8 * 1024) * 4);
}

TEST_CASE("the model shape counts what each layer multiplies", "[planner]") {
  const auto m = model_shape(llama({}));
  REQUIRE(m.layers.size() == 10);  // embedding, 8 blocks, head
  // A block: wq, wk, wv, wo (512 x 512 each) and w1, w2, w3 (512 x 2048): 4 x 262144 + 3 x
  // 1048576 multiply-adds per token; the embedding looks up (0), the head multiplies 512 x 1024.
  CHECK(m.layers[1].active_matmul == 4.0 * 512 * 512 + 3.0 * 512 * 2048);
  CHECK(m.layers[0].active_matmul == 0);
  CHECK(m.layers[9].active_matmul == 512.0 * 1024);
  CHECK(m.layers[1].block);
  CHECK_FALSE(m.layers[9].block);
  // Training FLOPs per token: 6 x the multiplying weights + 12 x layers x dim x seq.
  const double matmul = 8 * (4.0 * 512 * 512 + 3.0 * 512 * 2048) + 512.0 * 1024;
  CHECK(m.flops_per_token == Approx(6 * matmul + 12.0 * 8 * 512 * 1024));
}

TEST_CASE("one device: the step is the GEMMs at the achieved rate plus the optimizer", "[planner]") {
  const auto config = llama({});
  const auto m = model_shape(config);
  auto d = toy_device();
  d.memory_bandwidth = 1e30;  // elementwise work and the optimizer free: GEMMs alone
  Layout l;
  l.micro_batch = 2;
  const auto p = predict(m, config, l, 4, d, 8);
  CHECK(p.microbatches == 2);
  // Per micro-batch forward: 2 x tokens x (active weights + per-block causal attention s h)
  // FLOPs at peak x 0.5 x w / (w + 1e6), w = tokens x h x h; backward twice the forward.
  const double tokens = 2 * 1024.0, w = tokens * 512 * 512;
  const double rate = 100e12 * 0.5 * w / (w + 1e6);
  double active = 0;
  for (const auto& ls : m.layers) active += ls.active_matmul;
  const double fwd = (2 * tokens * active + 8 * 2 * tokens * 1024 * 512) / rate;
  CHECK(p.compute_s == Approx(2 * 3 * fwd).epsilon(1e-9));
  CHECK(p.step_s == Approx(p.compute_s).epsilon(1e-9));  // no pipeline, no communication
  CHECK(p.bubble_s == Approx(0).margin(1e-12));
}

TEST_CASE(
    "a block's elementwise traffic is counted from its widths, and each micro-batch moves the "
    "weights and their gradients",
    "[planner]") {
  const auto config = llama({});
  const auto m = model_shape(config);
  auto d = toy_device();
  d.peak_flops = 1e30;  // GEMMs free: the elementwise passes and the accumulation alone
  d.memory_bandwidth = 1e12;
  d.attention_keeps_probabilities = true;
  Layout l;
  l.micro_batch = 2;
  const auto p = predict(m, config, l, 4, d, 8);
  // Per token and block forward: 20 passes over h = 512, 3 over the GEMMs' widths
  // (4 x 512 + 3 x 2048 = 8192), 4 over the kept probabilities (8 heads x 1024 / 2); bf16.
  const double tokens = 2 * 1024.0;
  const double per_token = 20 * 512 + 3 * 8192.0 + 4 * 8 * 512.0;
  const double fwd = 8 * per_token * tokens * 2 / 1e12;
  // Each micro-batch streams the weights twice (forward and input-gradient GEMMs), writes fresh
  // gradients and adds them into the accumulated ones: 6 passes over fp32.
  double params = 0;
  for (const auto& ls : m.layers) params += ls.params;
  const double accumulate = 6 * 4 * params / 1e12;
  CHECK(p.microbatches == 2);
  CHECK(p.compute_s == Approx(2 * (3 * fwd + accumulate)).epsilon(1e-9));
  // Flash attention keeps no probabilities: less traffic.
  d.attention_keeps_probabilities = false;
  CHECK(predict(m, config, l, 4, d, 8).compute_s ==
        Approx(2 * (3 * fwd * (per_token - 4 * 8 * 512.0) / per_token + accumulate)).epsilon(1e-9));
}

TEST_CASE("under expert parallelism each MoE layer waits for the busiest rank's experts",
          "[planner]") {
  // The expected largest of n standard normals: 1/sqrt(pi) for 2, 1.02938 for 4, 1.42360 for 8.
  CHECK(expert_imbalance(1, 4) == 1);
  CHECK(expert_imbalance(2, 2) == Approx(1 + 0.3 / std::sqrt(2.0) / std::sqrt(M_PI)).epsilon(1e-6));
  CHECK(expert_imbalance(4, 1) == Approx(1 + 0.3 * 1.02938).epsilon(1e-5));
  CHECK(expert_imbalance(8, 1) == Approx(1 + 0.3 * 1.42360).epsilon(1e-5));

  const auto config = mixtral();
  const auto m = model_shape(config);
  // Three expert weights of dim x hidden per expert, top_k of the 4 run per token.
  CHECK(m.layers[1].expert_matmul == 2 * 3.0 * 256 * 512);
  auto d = toy_device();
  d.memory_bandwidth = 1e30;  // GEMMs alone
  Layout dp, ep;
  dp.dp = 2;
  ep.ep = 2;
  dp.micro_batch = ep.micro_batch = 2;
  const auto by_dp = predict(m, config, dp, 8, d, 8), by_ep = predict(m, config, ep, 8, d, 8);
  // Per micro-batch and MoE layer the busiest rank runs imbalance x its share of the experts'
  // multiply-adds, forward and twice backward; the other GEMMs are the same.
  const double tokens = 2 * 256.0, w = tokens * 256 * 256, rate = 100e12 * 0.5 * w / (w + 1e6);
  const double extra = (expert_imbalance(2, 2) - 1) * 2 * tokens * m.layers[1].expert_matmul / rate;
  CHECK(by_ep.compute_s - by_dp.compute_s == Approx(2 * 3 * 4 * extra).epsilon(1e-9));
  // Its exposed all-to-alls: per MoE layer and micro-batch the count exchange (4 experts' counts,
  // a latency) and dispatch and combine of the busiest rank's top_k rows of [t, h], forward and
  // backward.
  const auto& link = d.intra_node;
  const double per_layer = all_to_all_s(4 * 4, 2, link) +
                           2 * all_to_all_s(expert_imbalance(2, 2) * tokens * 256 * 2 * 2, 2, link);
  CHECK(by_ep.exposed_s.at("ep") == Approx(2 * 2 * 4 * per_layer).epsilon(1e-9));
  CHECK(by_dp.exposed_s.at("ep") == 0);
}

TEST_CASE("under ZeRO-1 with checkpointing the optimizer step is the memory peak", "[planner]") {
  const auto config = llama({});
  const auto m = model_shape(config);
  Layout l;
  l.dp = 2;
  l.zero = 1;
  l.checkpointing = true;
  const auto p = predict(m, config, l, 2, toy_device(), 8);
  double w = 0;
  for (const auto& ls : m.layers) w += ls.params;
  // Through the step: fp32 weights and, on this rank's half, AdamW's moments and fp32 masters
  // (12 bytes). At the step: the whole gradients ZeRO-1 keeps, the reduced half it reads, and
  // a 25 MiB bucket of updated weights being gathered (one at a time).
  const double slice = w / 2, bucket = 25.0 * 1024 * 1024;
  const double expected = 4 * w + 12 * slice + 4 * w + 4 * slice + std::min(bucket, 4 * w);
  CHECK(p.peak_memory_bytes == Approx(expected).epsilon(1e-12));
}

TEST_CASE("a checkpointed rank peaks at its last block's recompute, every other gradient made",
          "[planner]") {
  using namespace vescale::train;
  const auto config = llama({});
  const auto m = model_shape(config);
  double w = 0;
  for (const auto& ls : m.layers) w += ls.params;
  Layout l;  // one rank, one micro-batch of one sequence
  l.dp = 1;
  const double block = block_activation_bytes(m.block, 1024, 1, 1, false, false, false),
               block_in = block_input_bytes(1024, 1, 512, 1, false, false),
               first_gradients = block_backward_bytes(m.block, 1024, 1, 1, false, false),
               logits = 8 * 1024.0 * 1024;  // fp32 logits and their gradient
  // Without checkpointing: fp32 weights and AdamW's moments, 8 blocks' activations, the logits
  // and the last block's first gradients; no parameter gradient exists yet.
  const auto plain = predict(m, config, l, 1, toy_device(), 8);
  CHECK(plain.peak_memory_bytes ==
        Approx(12 * w + 8 * block + logits + first_gradients).epsilon(1e-12));
  // Checkpointed: each block's input, one block recomputed, and by then the gradients of the
  // seven blocks after it (counted whole: 4 bytes per weight).
  l.checkpointing = true;
  const auto ckpt = predict(m, config, l, 1, toy_device(), 8);
  CHECK(ckpt.peak_memory_bytes ==
        Approx(12 * w + 8 * block_in + block + logits + first_gradients + 4 * w).epsilon(1e-12));
}

TEST_CASE(
    "under expert parallelism without dp the experts are stepped whole and their routed "
    "rows stay twice more",
    "[planner]") {
  using namespace vescale::train;
  const auto config = mixtral();
  const auto m = model_shape(config);
  double dense = 0, experts = 0;
  for (const auto& ls : m.layers)
    dense += ls.params - ls.expert_params, experts += ls.expert_params;
  Layout l;
  l.ep = 2;
  l.dp = 1;
  l.zero = 1;
  l.micro_batch = 4;
  const auto p = predict(m, config, l, 8, toy_device(), 8);  // one micro-batch per data rank
  // ZeRO-1 slices the dense weights over the 2 data ranks (fp32 master + moments: 12 bytes);
  // each rank's 2 experts have no gradient to reduce, so plain AdamW steps them whole (8).
  const double w = dense + experts / 2, slice = dense / 2;
  // Each block keeps, per token, 2 x top_k more rows of the width: the routed input as the
  // all-to-all delivered it and the expert's output as it came back.
  vescale::models::BlockActivations kept = m.block;
  kept.replicated += 2 * 2 * 256;
  const double block = block_activation_bytes(kept, 256, 4, 1, false, false, false),
               first_gradients = block_backward_bytes(m.block, 256, 4, 1, false, false),
               logits = 8 * 256.0 * 4 * 512;
  // One micro-batch: the forward's turn is the peak (the optimizer step's whole gradients,
  // reduced slice and 4 bytes of dense weights per element in a bucket are smaller).
  const double forward = 4 * block + logits + first_gradients;
  const double step = 4 * w + 4 * slice + 4 * dense;
  REQUIRE(forward > step);
  CHECK(p.peak_memory_bytes ==
        Approx(4 * w + 12 * slice + 8 * experts / 2 + forward).epsilon(1e-12));
}

TEST_CASE("the megatron stack makes fewer elementwise passes and hides TP chunks behind the GEMMs",
          "[planner]") {
  const auto config = llama({});
  const auto m = model_shape(config);
  const auto& megatron = training_stack("megatron");
  {  // GEMMs free: per token and block forward 10 passes over h = 512, 1 over the GEMMs'
     // widths (8192), no probabilities (flash); bf16; plus 3 passes over the fp32 weights
     // (bf16 weights read twice, gradients accumulated in the fused weight-gradient GEMM).
    auto d = toy_device();
    d.peak_flops = 1e30;
    d.memory_bandwidth = 1e12;
    Layout l;
    l.micro_batch = 2;
    const double tokens = 2 * 1024.0, fwd = 8 * (10 * 512 + 8192.0) * tokens * 2 / 1e12;
    double params = 0;
    for (const auto& ls : m.layers) params += ls.params;
    CHECK(predict(m, config, l, 4, d, 8, nullptr, megatron).compute_s ==
          Approx(2 * (3 * fwd + 3 * 4 * params / 1e12)).epsilon(1e-9));
  }
  {  // tp = 2: a block's two all-reduces (2 MB each) take far less than its GEMMs, so only the
     // first of the two chunks is exposed: half of what vescale's trainer exposes.
    auto d = toy_device();
    d.memory_bandwidth = 1e30;
    Layout l;
    l.tp = 2;
    l.dp = 1;
    l.micro_batch = 2;
    const auto ours = predict(m, config, l, 4, d, 8);
    const auto theirs = predict(m, config, l, 4, d, 8, nullptr, megatron);
    const double per_block = 2 * all_reduce_s(2 * 1024.0 * 512 * 2, 2, d.intra_node);
    CHECK(ours.exposed_s.at("tp") == Approx(2 * 8 * 2 * per_block).epsilon(1e-9));
    CHECK(theirs.exposed_s.at("tp") == Approx(ours.exposed_s.at("tp") / 2).epsilon(1e-9));
    CHECK(theirs.compute_s == Approx(ours.compute_s).epsilon(1e-12));
  }
  CHECK_THROWS_WITH(training_stack("deepspeed"),
                    Catch::Contains("use vescale") && Catch::Contains("or megatron"));
}

TEST_CASE("ranks sharing cores lend their bubble to each other, and nothing else changes",
          "[planner]") {
  const auto config = llama({});
  const auto m = model_shape(config);
  auto d = toy_device();
  auto shared = d;
  shared.ranks_per_core = 2;
  Layout flat;
  flat.dp = 2;
  flat.micro_batch = 2;
  const auto a = predict(m, config, flat, 8, d, 8), b = predict(m, config, flat, 8, shared, 8);
  CHECK(b.step_s == a.step_s);  // no pipeline: every rank busy all the time
  Layout pipe;
  pipe.pp = 2;
  pipe.micro_batch = 1;
  const auto p = predict(m, config, pipe, 4, d, 8), q = predict(m, config, pipe, 4, shared, 8);
  const double own = p.step_s - p.optimizer_s, lent = q.step_s - q.optimizer_s;
  // The critical path on whole cores at best (half), the pipeline ranks' average work at least
  // (the busiest rank's over the two ranks, as a floor), never slower than without lending.
  CHECK(lent < own);
  CHECK(lent >= own / 2 - 1e-12);
  CHECK(lent >= p.compute_s / 2);
  CHECK(q.compute_s == p.compute_s);
}

TEST_CASE(
    "overlapped gradient traffic costs the compute overlap_cost of its time, hidden part only",
    "[planner]") {
  const auto config = llama({});
  const auto m = model_shape(config);
  double params = 0;
  for (const auto& ls : m.layers) params += ls.params;
  Layout l;
  l.dp = 2;
  l.micro_batch = 1;
  for (double bandwidth : {400e9, 1e9}) {
    CAPTURE(bandwidth);
    auto d = toy_device();
    d.intra_node = {bandwidth, 0};
    auto costly = d;
    costly.overlap_cost = 0.5;
    const auto free = predict(m, config, l, 8, d, 8), paid = predict(m, config, l, 8, costly, 8);
    CHECK(paid.compute_s == free.compute_s);
    const double extra = paid.exposed_s.at("dp") - free.exposed_s.at("dp");
    // The fp32 gradients' all-reduce behind the last micro-batch's backward: on the fast link
    // all of it is hidden (and half of it charged); on the slow one only the backward's length.
    const double reduction = all_reduce_s(4 * params, 2, d.intra_node);
    if (bandwidth > 1e11) {
      CHECK(extra == Approx(0.5 * reduction).epsilon(1e-9));
    } else {
      CHECK(extra > 0);
      CHECK(extra < 0.5 * reduction);
      CHECK(extra <= 0.5 * free.compute_s / static_cast<double>(free.microbatches));
    }
  }
  // One rank has nothing to overlap: the same step either way.
  Layout one;
  one.micro_batch = 1;
  auto d = toy_device(), costly = toy_device();
  costly.overlap_cost = 0.5;
  CHECK(predict(m, config, one, 8, costly, 8).step_s == predict(m, config, one, 8, d, 8).step_s);
}

TEST_CASE("the search prefers what is plainly best, and prunes what does not fit", "[planner]") {
  // A small model on 8 devices with one node's fast links: the best is pure data parallelism
  // (no bubble, no tensor-parallel traffic on the critical path, no recomputation); ZeRO only
  // changes who updates which slice.
  const auto config = llama({});
  const auto m = model_shape(config);
  auto d = toy_device();
  SearchOptions o;
  o.gpus = 8;
  o.global_batch = 64;
  o.top = 3;
  const auto r = search(m, config, d, o);
  REQUIRE(!r.best.empty());
  CHECK(r.weighed > 100);
  const auto& best = r.best.front().layout;
  CHECK(best.pp == 1);
  CHECK(best.tp == 1);
  CHECK(best.dp == 8);
  CHECK_FALSE(best.checkpointing);
  for (size_t i = 1; i < r.best.size(); ++i)
    CHECK(r.best[i - 1].prediction.step_s <= r.best[i].prediction.step_s);
  // With a device of 1 GB only layouts that split the model (or checkpoint) fit, and the rest is
  // counted as not fitting.
  d.memory_bytes = 0.4e9;
  const auto small = search(m, config, d, o);
  CHECK(small.pruned.count("does not fit the device's memory"));
  for (const auto& c : small.best) CHECK(c.prediction.peak_memory_bytes <= 0.9 * 0.4e9);
}

TEST_CASE("calibration fits recover the curve and the link they were made from", "[planner]") {
  // rate = 2e11 x w / (w + 5e6) at six sizes: the fit gives the peak and the half point back.
  std::vector<std::pair<double, double>> gemms;
  for (double n : {64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0}) {
    const double w = n * n * n;
    gemms.push_back({w, 2e11 * w / (w + 5e6)});
  }
  const auto [peak, half] = fit_gemm_curve(gemms);
  CHECK(peak == Approx(2e11).epsilon(0.01));
  CHECK(half == Approx(5e6).epsilon(0.03));  // the grid steps 10^0.01 (2.3%)
  // All-reduces over 4 ranks of a 10 GB/s, 20 us link: 1.5 V / 1e10 + 6 x 20 us.
  std::vector<std::pair<double, double>> runs;
  for (double v : {4e3, 6.4e4, 1e6, 8e6, 1.6e7}) runs.push_back({v, 1.5 * v / 1e10 + 6 * 20e-6});
  const LinkFigures link = fit_collective(Collective::AllReduce, runs, 4);
  CHECK(link.bandwidth == Approx(1e10).epsilon(1e-9));
  CHECK(link.latency == Approx(20e-6).epsilon(1e-9));
  // A reduce-scatter is one pass: 0.75 V / 1e10 + 3 x 20 us.
  runs.clear();
  for (double v : {4e3, 6.4e4, 1e6, 8e6, 1.6e7}) runs.push_back({v, 0.75 * v / 1e10 + 3 * 20e-6});
  const LinkFigures rs = fit_collective(Collective::ReduceScatter, runs, 4);
  CHECK(rs.bandwidth == Approx(1e10).epsilon(1e-9));
  CHECK(rs.latency == Approx(20e-6).epsilon(1e-9));
  CHECK_THROWS_AS(fit_gemm_curve({{1e6, 1e9}}), vescale::Error);
}
