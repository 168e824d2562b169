// Training-step time of a tiny LLaMA under tensor parallelism, three ways in one process:
//   eager    vescale::models::Llama + plan::parallelize(configs/plans/llama_tp.json), DTensor dispatch
//   static   the same model with static eager on (recorded dispatch replayed each step)
//   baseline the same math hand-written on local shards with explicit collectives (Megatron
//            style f/g operators, vocab-parallel embedding and cross-entropy): the lower bound
// All three start from the same weights and see the same batches; the baseline's first loss
// must equal eager's (checked, printed). Variants run in interleaved rounds so that drift and
// the load of other processes on the machine hit all alike. Run under vescale-run; rank 0
// prints one JSON line per variant, bench/tp_step.sh turns them into bench/results/tp_step.md.
// VESCALE_PROFILE=1 (or =shapes) also prints rank 0's op table per variant (bench_util.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "vescale/models/llama/llama.h"
#include "vescale/nn/module_hooks.h"
#include "bench_util.h"
#include "vescale/common/check.h"
#include "vescale/parallel/grad_reduce.h"
#include "vescale/dist/process_group.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/optim/adamw.h"
#include "vescale/plan/parallelize.h"
#include "vescale/random/random.h"
#include "vescale/kernels/host_memory.h"

using namespace vescale;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// configs/llama_tiny.json's training step (batch 16 x seq 128) unless TP_STEP_BATCH / TP_STEP_SEQ
// say otherwise.
const int64_t kBatch = env_int("TP_STEP_BATCH", 16), kSeq = env_int("TP_STEP_SEQ", 128);
constexpr double kLr = 1e-3, kEps = 1e-6, kWeightDecay = 0.1;

// configs/llama_tiny.json's shapes, with 8 query / 4 kv heads (head_dim 16) instead of 4 / 2 so
// that TP=4 splits whole kv heads; every parameter keeps its shape.
vescale::models::LlamaOptions bench_llama() {
  vescale::models::LlamaOptions o;
  o.vocab_size = 256;
  o.dim = 128;
  o.n_layers = 4;
  o.n_heads = 8;
  o.n_kv_heads = 4;
  o.ffn_dim = 384;
  o.norm_eps = 1e-5;
  o.rope_theta = 10000.0;
  o.max_seq_len = 128;
  return o;
}

// The same tokens on every rank: [B, T+1], inputs and next-token targets.
at::Tensor batch(int64_t step, int64_t vocab) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  return at::randint(vocab, {kBatch, kSeq + 1}, gen, at::kLong);
}

// ---- the hand-written baseline -------------------------------------------------------------

dist::ProcessGroup* g_tp = nullptr;  // the tp group the baseline's collectives run on

at::Tensor all_reduce(at::Tensor t, dist::ReduceOp op = dist::ReduceOp::Sum) {
  t = t.contiguous();
  g_tp->all_reduce(t, op).wait();
  return t;
}

// Megatron's f: identity forward, all-reduce of the input gradient backward (before a
// column-parallel layer, whose input gradient is a partial sum per rank).
struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x) { return x.view_as(x); }
  static variable_list backward(AutogradContext*, variable_list g) {
    return {all_reduce(g[0].clone())};
  }
};

// Megatron's g: all-reduce forward (after a row-parallel layer), identity backward.
struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x) { return all_reduce(x.clone()); }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0]}; }
};

// Mean cross-entropy over vocab-sharded logits [N, V/P] (this rank holds vocab [lo, lo + V/P)):
// global max, sum of exps and target logit by three all-reduces; the gradient is local.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, int64_t lo) {
    const int64_t n = logits.size(0), v = logits.size(1);
    auto max = all_reduce(std::get<0>(logits.max(-1, /*keepdim=*/true)), dist::ReduceOp::Max);
    auto z = logits - max;
    auto exp = z.exp();
    auto sum_exp = all_reduce(exp.sum(-1, /*keepdim=*/true));
    auto mine = (targets >= lo).logical_and(targets < lo + v);
    auto local_t = (targets - lo).masked_fill(mine.logical_not(), 0).unsqueeze(-1);
    auto target_z =
        all_reduce(z.gather(-1, local_t).masked_fill(mine.logical_not().unsqueeze(-1), 0.0));
    ctx->save_for_backward({exp.div_(sum_exp), local_t, mine});
    ctx->saved_data["n"] = n;
    return (sum_exp.log() - target_z).mean();
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    auto grad = saved[0].clone();  // softmax
    grad.scatter_add_(-1, saved[1], -saved[2].unsqueeze(-1).to(grad.scalar_type()));
    grad.mul_(g[0] / static_cast<double>(ctx->saved_data["n"].toInt()));
    return {grad, at::Tensor(), at::Tensor()};
  }
};

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return w * (x * at::rsqrt(x.pow(2).mean(-1, true) + eps));
}

// LLaMA on this rank's shards, with the same math as vescale::models::Llama.
struct LocalTpLlama {
  vescale::models::LlamaOptions o;
  int64_t tp, rank;
  std::map<std::string, at::Tensor> p;  // local shards, keyed by the model's parameter names
  at::Tensor cos, sin;

  at::Tensor w(const std::string& name) const { return p.at(name); }

  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets) const {
    const int64_t B = tokens.size(0), T = tokens.size(1), hd = o.dim / o.n_heads;
    const int64_t vocab_lo = rank * (o.vocab_size / tp);
    // Vocab-parallel embedding: rows this rank holds, zeros elsewhere, summed over ranks.
    auto mine = (tokens >= vocab_lo).logical_and(tokens < vocab_lo + o.vocab_size / tp);
    auto idx = (tokens - vocab_lo).masked_fill(mine.logical_not(), 0);
    auto h =
        ReduceFromTp::apply(at::embedding(w("tok_embeddings.weight"), idx) * mine.unsqueeze(-1));
    auto c = cos.narrow(0, 0, T), s = sin.narrow(0, 0, T);
    auto heads = [&](const at::Tensor& t) { return t.view({B, T, -1, hd}).transpose(1, 2); };
    const int64_t rep = o.n_heads / o.n_kv_heads;
    for (int64_t i = 0; i < o.n_layers; ++i) {
      const std::string l = "layers." + std::to_string(i) + ".";
      auto x = CopyToTp::apply(rms_norm(h, w(l + "attention_norm.weight"), o.norm_eps));
      auto q = vescale::models::apply_rope(heads(at::linear(x, w(l + "attention.wq.weight"))), c, s);
      auto k = vescale::models::apply_rope(heads(at::linear(x, w(l + "attention.wk.weight"))), c, s);
      auto v = heads(at::linear(x, w(l + "attention.wv.weight")));
      auto repeat_kv = [&](const at::Tensor& t) {
        const int64_t kv = t.size(1);
        return t.unsqueeze(2).expand({B, kv, rep, T, hd}).reshape({B, kv * rep, T, hd});
      };
      auto y = at::scaled_dot_product_attention(q, repeat_kv(k), repeat_kv(v), {}, 0.0,
                                                /*is_causal=*/true);
      h = h + ReduceFromTp::apply(
                  at::linear(y.transpose(1, 2).reshape({B, T, -1}), w(l + "attention.wo.weight")));
      x = CopyToTp::apply(rms_norm(h, w(l + "ffn_norm.weight"), o.norm_eps));
      auto a = at::silu(at::linear(x, w(l + "feed_forward.w1.weight"))) *
               at::linear(x, w(l + "feed_forward.w3.weight"));
      h = h + ReduceFromTp::apply(at::linear(a, w(l + "feed_forward.w2.weight")));
    }
    auto x = CopyToTp::apply(rms_norm(h, w("norm.weight"), o.norm_eps));
    auto logits = at::linear(x, w("output.weight"));  // [B, T, V/P]
    return VocabParallelCrossEntropy::apply(logits.flatten(0, 1), targets.flatten(0, 1), vocab_lo);
  }
};

// ---- timing ----------------------------------------------------------------------------------

using bench::median;

struct Variant {
  std::string name;
  std::function<double(int64_t step)> step;  // one training step; returns the loss
  std::function<void()> enter, leave;        // set up / tear down global modes around its steps
  std::vector<double> ms, cpu_ms;            // wall and process CPU time per timed step
  std::vector<double> thread_cpu_ms;  // the stepping thread's CPU time (backward runs on it too)
  std::vector<double> round_ms;       // per round: the median wall time of its steps
  int64_t dispatch_calls = 0,
          redistributions = 0;               // DTensor dispatcher counters over the timed steps
  int64_t collectives = 0, all_reduces = 0;  // issued on any group over the timed steps
  double first_loss = 0;
};

}  // namespace

int main() {
  at::set_num_threads(1);
  kernels::cache_host_memory();  // as vescale-train runs, for every variant
  dist::init({.device = "cpu"});
  const int warmup = env_int("TP_STEP_WARMUP", 3), rounds = env_int("TP_STEP_ROUNDS", 5),
            per_round = env_int("TP_STEP_PER_ROUND", 4);
  auto mesh = mesh::DeviceMesh::init({{"tp", -1}});
  const int64_t tp = mesh.size("tp");
  g_tp = &mesh.group("tp");
  const auto o = bench_llama();
  // TP_STEP_PLAN: another plan file for the DTensor variants (e.g. to try forward reshardings).
  const char* plan_file = std::getenv("TP_STEP_PLAN");
  auto plan = plan::Plan::from_json_file(
      plan_file ? std::string(plan_file)
                : std::string(VESCALE_SOURCE_DIR "/configs/plans/llama_tp.json"));

  // Two DTensor models from the same seed (eager and static eager keep separate optimizer state).
  auto make_model = [&] {
    random::manual_seed(1234);
    vescale::models::Llama m(o);
    plan::parallelize(*m, plan, mesh, {.init = [&] { m->init_weights(); }});
    return m;
  };
  vescale::models::Llama eager_model = make_model(), static_model = make_model();
  // Every variant steps with vescale's AdamW (libtorch's fused kernel; DTensors on their shards),
  // what vescale-train runs, so the variants differ only in forward and backward.
  auto adamw = [](optim::NamedParams params) {
    return std::make_shared<optim::AdamW>(
        std::vector<optim::ParamGroup>{{std::move(params), kWeightDecay}},
        optim::AdamWOptions{.lr = kLr, .eps = kEps});
  };
  auto named = [](vescale::models::Llama& m) {
    optim::NamedParams out;
    for (auto& kv : m->named_parameters()) out.emplace_back(kv.key(), kv.value());
    return out;
  };
  auto eager_opt = adamw(named(eager_model)), static_opt = adamw(named(static_model));

  // The baseline starts from the DTensor model's local shards.
  LocalTpLlama base{o, tp, mesh.coordinate("tp"), {}, {}, {}};
  optim::NamedParams base_params;
  for (auto& kv : eager_model->named_parameters()) {
    const at::Tensor& t = kv.value();
    auto local = (dtensor::is_dtensor(t) ? dtensor::to_local(t.detach()) : t.detach())
                     .clone()
                     .requires_grad_(true);
    base.p[kv.key()] = local;
    base_params.emplace_back(kv.key(), local);
  }
  std::tie(base.cos, base.sin) = vescale::models::rope_tables(o, at::TensorOptions().dtype(at::kFloat));
  auto base_opt = adamw(base_params);

  auto replicated = [&](const at::Tensor& t) {
    return dtensor::from_local(t.contiguous(), mesh, {dtensor::Replicate()}, t.sizes().vec());
  };
  auto dtensor_step = [&](vescale::models::Llama& model, optim::AdamW& opt, int64_t s) {
    dtensor::static_eager_step();
    auto full = batch(s, o.vocab_size);
    auto x = replicated(full.slice(1, 0, kSeq)), y = replicated(full.slice(1, 1, kSeq + 1));
    opt.zero_grad();
    at::Tensor loss =
        at::cross_entropy_loss(vescale::nn::call(model, x).flatten(0, 1), y.flatten(0, 1));
    {
      dtensor::BackwardOnCallerThread same_thread;  // as the trainer
      loss.backward();
    }
    parallel::reduce_gradients(*model);
    opt.step();
    // The loss may be Partial (the vocab-parallel nll with Replicate norm outputs gives one):
    // its local value is this rank's share, so read the full value.
    return dtensor::full_tensor(loss.detach()).item<double>();
  };

  std::vector<Variant> variants;
  auto add = [&](std::string name, std::function<double(int64_t)> step,
                 std::function<void()> enter = {}, std::function<void()> leave = {}) {
    Variant v;
    v.name = std::move(name), v.step = std::move(step), v.enter = std::move(enter),
    v.leave = std::move(leave);
    variants.push_back(std::move(v));
  };
  add("eager", [&](int64_t s) { return dtensor_step(eager_model, *eager_opt, s); });
  add(
      "static", [&](int64_t s) { return dtensor_step(static_model, *static_opt, s); },
      [] { dtensor::set_static_eager(true); }, [] { dtensor::set_static_eager(false); });
  add("baseline", [&](int64_t s) {
    auto full = batch(s, o.vocab_size);
    base_opt->zero_grad();
    auto loss = base.loss(full.slice(1, 0, kSeq), full.slice(1, 1, kSeq + 1));
    loss.backward();
    base_opt->step();
    return loss.item<double>();
  });

  // TP_STEP_VARIANTS: a comma-separated subset to run (e.g. "eager" under a profiler); the first
  // one kept is the reference of the first-loss check.
  if (const char* only = std::getenv("TP_STEP_VARIANTS")) {
    const std::string keep = std::string(",") + only + ",";
    std::vector<Variant> kept;
    for (auto& v : variants)
      if (keep.find("," + v.name + ",") != std::string::npos) kept.push_back(std::move(v));
    variants = std::move(kept);
  }
  // Each variant walks the same batch sequence: step s of every variant sees batch(s).
  std::vector<int64_t> next_step(variants.size(), 0);
  auto run = [&](size_t vi, int n, bool timed) {
    Variant& v = variants[vi];
    if (v.enter) v.enter();
    for (int i = 0; i < n; ++i) {
      mesh.group("tp").barrier().wait();
      const auto ds0 = dtensor::dispatch_stats();
      const auto cs0 = dist::collective_stats();
      const double cpu0 = bench::process_cpu_ms(), tcpu0 = bench::thread_cpu_ms();
      auto t0 = std::chrono::steady_clock::now();
      const double loss = v.step(next_step[vi]);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const double cpu = bench::process_cpu_ms() - cpu0, tcpu = bench::thread_cpu_ms() - tcpu0;
      const auto ds1 = dtensor::dispatch_stats();
      const auto cs1 = dist::collective_stats();
      if (next_step[vi] == 0) v.first_loss = loss;
      ++next_step[vi];
      if (timed) {
        v.ms.push_back(ms);
        v.cpu_ms.push_back(cpu);
        v.thread_cpu_ms.push_back(tcpu);
        v.dispatch_calls += ds1.calls - ds0.calls;
        v.redistributions += ds1.redistributions - ds0.redistributions;
        v.collectives += cs1.total() - cs0.total();
        v.all_reduces += cs1.all_reduce - cs0.all_reduce;
      }
    }
    if (v.leave) v.leave();
    if (timed) v.round_ms.push_back(median(std::vector<double>(v.ms.end() - n, v.ms.end())));
  };
  for (size_t vi = 0; vi < variants.size(); ++vi) run(vi, warmup, false);
  // TP_STEP_OP_COUNTS=1: count every dispatcher call (DTensor ops count twice: the DTensor call
  // and its local op) over one more step of each variant, to compare what they run.
  if (env_int("TP_STEP_OP_COUNTS", 0)) {
    static std::mutex mu;
    static std::map<std::string, int64_t> counts;
    auto handle = at::addGlobalCallback(
        at::RecordFunctionCallback([](const at::RecordFunction& fn)
                                       -> std::unique_ptr<at::ObserverContext> {
          std::lock_guard<std::mutex> lock(mu);
          ++counts[fn.name()];
          return nullptr;
        }).scopes({at::RecordScope::FUNCTION}));
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      counts.clear();
      run(vi, 1, false);
      if (dist::rank() == 0)
        for (auto& [name, n] : counts)
          std::printf("opcount %s %s %lld\n", variants[vi].name.c_str(), name.c_str(),
                      static_cast<long long>(n));
    }
    at::removeCallback(handle);
  }
  // VESCALE_PROFILE=1 (or =shapes): per variant, rank 0's op table over 2 more steps (self time per
  // op; a DTensor op's own self time is the DTensor layer's overhead, its local op the kernel).
  if (const char* profile = std::getenv("VESCALE_PROFILE")) {
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      std::unique_ptr<bench::OpProfile> recording;
      if (dist::rank() == 0)
        recording = std::make_unique<bench::OpProfile>("op profile: " + variants[vi].name, 2,
                                                       std::string(profile) == "shapes");
      run(vi, 2, false);
    }
  }
  for (int r = 0; r < rounds; ++r)
    for (size_t vi = 0; vi < variants.size(); ++vi) run(vi, per_round, true);

  // One more step of the first variant with the redistribution log on: where the DTensor step's
  // moves come from.
  dtensor::set_redistribution_log(true);
  variants[0].step(next_step[0]++);
  const auto moves = dtensor::redistribution_log();
  dtensor::set_redistribution_log(false);

  const auto se = dtensor::static_eager_stats();
  const double ref = variants[0].first_loss;
  for (auto& v : variants)
    VESCALE_CHECK(
        std::abs(v.first_loss - ref) <= 1e-5 * std::abs(ref), "tp_step: the ", v.name,
        " variant's first loss ", v.first_loss, " differs from eager's ", ref,
        ": the variants no longer compute the same step, so their times are not comparable");
  if (dist::rank() == 0) {
    for (auto& v : variants) {
      std::string rounds_json;
      for (double r : v.round_ms)
        rounds_json += (rounds_json.empty() ? "" : ", ") + std::to_string(r);
      std::printf(
          "{\"impl\": \"%s\", \"tp\": %lld, \"median_ms\": %.3f, \"min_ms\": %.3f, \"max_ms\": "
          "%.3f, \"cpu_ms\": %.3f, "
          "\"thread_cpu_ms\": %.3f, \"round_ms\": [%s], \"steps\": %zu, "
          "\"dispatch_calls_per_step\": %lld, \"redistributions_per_step\": %lld, "
          "\"collectives_per_step\": %lld, "
          "\"all_reduces_per_step\": %lld, "
          "\"first_loss\": %.8f, \"first_loss_rel_diff_vs_eager\": %.3e, \"batch\": %lld, \"seq\": "
          "%lld, "
          "\"static_replayed\": %lld, \"static_recorded\": %lld, \"static_diverged\": %lld}\n",
          v.name.c_str(), static_cast<long long>(tp), median(v.ms),
          *std::min_element(v.ms.begin(), v.ms.end()), *std::max_element(v.ms.begin(), v.ms.end()),
          median(v.cpu_ms), median(v.thread_cpu_ms), rounds_json.c_str(), v.ms.size(),
          static_cast<long long>(v.dispatch_calls / static_cast<int64_t>(v.ms.size())),
          static_cast<long long>(v.redistributions / static_cast<int64_t>(v.ms.size())),
          static_cast<long long>(v.collectives / static_cast<int64_t>(v.ms.size())),
          static_cast<long long>(v.all_reduces / static_cast<int64_t>(v.ms.size())), v.first_loss,
          std::abs(v.first_loss - ref) / std::abs(ref), static_cast<long long>(kBatch),
          static_cast<long long>(kSeq), static_cast<long long>(se.replayed),
          static_cast<long long>(se.recorded), static_cast<long long>(se.diverged));
    }
    std::string log;
    for (auto& [what, n] : moves)
      log += (log.empty() ? "" : ", ") + ("\"" + what + "\": " + std::to_string(n));
    std::printf("{\"impl\": \"%s_redistributions\", \"tp\": %lld, \"moves\": {%s}}\n",
                variants[0].name.c_str(), static_cast<long long>(tp), log.c_str());
    std::fflush(stdout);
  }
  plan::remove_forward_hooks(*eager_model);
  plan::remove_forward_hooks(*static_model);
  dist::shutdown();
  return 0;
}
