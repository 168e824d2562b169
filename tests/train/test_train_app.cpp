// vescale-train end to end: trains nanogpt_tiny on the built-in corpus, the loss falls and the
// metrics JSONL is well-formed; --dry-run of LLaMA-3 70B; config errors reach the user.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

using Catch::Matchers::Contains;

namespace {
struct Result {
  int code = -1;
  std::string out;
};

Result run(const std::string& cmd) {
  Result r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string TRAIN = VESCALE_TRAIN;
const std::string CONFIGS = VESCALE_SOURCE_DIR "/configs/";
}  // namespace

TEST_CASE("vescale-train trains nanogpt_tiny: loss falls, metrics JSONL per step", "[train_app]") {
  const std::string jsonl = "/tmp/vescale_train_app." + std::to_string(::getpid()) + ".jsonl";
  auto r = run(TRAIN + " --config " + CONFIGS +
               "nanogpt_tiny.json --set train.steps=40 --set train.batch_size=8 " +
               "--set train.warmup_steps=5 --set log.metrics_jsonl=" + jsonl);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("step 40/40 | loss"));
  CHECK_THAT(r.out, Contains("tok/s | MFU"));
  CHECK_THAT(r.out, Contains("val loss"));
  std::ifstream f(jsonl);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(f, line)) rows.push_back(nlohmann::json::parse(line));
  REQUIRE(rows.size() == 40);
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i]["step"] == i + 1);
    CHECK(std::isfinite(rows[i]["loss"].get<double>()));
    // nanogpt_tiny's schedule by hand: 5 warmup steps to 2e-3, then cosine to 2e-4 at step 40.
    const double s = static_cast<double>(i);
    const double lr = i < 5 ? 2e-3 * (s + 1) / 5
                            : 2e-4 + 0.5 * (1 + std::cos(M_PI * (s - 5) / 35)) * (2e-3 - 2e-4);
    CHECK(rows[i]["lr"].get<double>() == Approx(lr).epsilon(1e-12));
    CHECK(rows[i]["grad_norm"].get<double>() > 0);
    // The throughput is the step's tokens over its time.
    CHECK(rows[i]["tokens_per_s"].get<double>() ==
          Approx(8.0 * 128 / (rows[i]["step_ms"].get<double>() / 1000)).epsilon(1e-9));
    CHECK(rows[i]["tokens"] == (i + 1) * 8 * 128);
    CHECK(rows[i].contains("mfu"));
  }
  // Byte-level text starts at ln(256) = 5.5; 40 steps get well below.
  CHECK(rows.front()["loss"].get<double>() > 5.0);
  CHECK(rows.back()["loss"].get<double>() < rows.front()["loss"].get<double>() - 1.5);
  CHECK(rows.back().contains("val_loss"));
  std::remove(jsonl.c_str());
}

TEST_CASE("vescale-train warns once when MFU exceeds 100% (peak_flops set too low)",
          "[train_app]") {
  const std::string base = TRAIN + " --config " + CONFIGS +
                           "nanogpt_tiny.json --set train.steps=3 --set train.batch_size=2 " +
                           "--set train.log_every=1 --set log.metrics_jsonl=";
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
    return n;
  };
  // 1 kFLOP/s: any device beats it, on every logged step; the warning comes once.
  auto low = run(base + " --set train.peak_flops=1e3");
  INFO(low.out);
  REQUIRE(low.code == 0);
  CHECK(count(low.out, "MFU above 100%: each device reaches") == 1);
  CHECK_THAT(low.out, Contains("above the peak of 1e+03 (train.peak_flops)"));
  // 1 EFLOP/s: no CPU reaches it.
  auto high = run(base + " --set train.peak_flops=1e18");
  INFO(high.out);
  REQUIRE(high.code == 0);
  CHECK(count(high.out, "MFU above 100%") == 0);
  CHECK_THAT(high.out, Contains("| MFU 0.00%"));
  // The default, "auto": on a CPU the peak is a GEMM measured at start, and the figure says so.
  auto measured = run(base);
  INFO(measured.out);
  REQUIRE(measured.code == 0);
  CHECK_THAT(measured.out, Contains("MFU vs measured GEMM peak: "));
  CHECK_THAT(measured.out, Contains("% vs measured GEMM peak |"));
  CHECK(count(measured.out, "MFU above 100%") == 0);
}

TEST_CASE("vescale-train --dry-run reports LLaMA-3 70B without memory", "[train_app]") {
  auto r = run(TRAIN + " --dry-run --config " + CONFIGS + "llama3_70b.json");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("model: llama, 70.55B parameters (70553706496)"));
  CHECK_THAT(r.out, Contains("mesh: pp=8, dp=1, tp=8 (64 ranks)"));
  CHECK_THAT(r.out, Contains("per rank"));
  // The recipe (pp=8 x tp=8 with sequence parallelism, checkpointed) fits an 80 GB device with
  // room to spare on 64 GPUs, and on 128 (dp=2, ZeRO-1 halves the optimizer state).
  CHECK_THAT(r.out,
             Contains("layers.70 .. output") && Contains("an 80 GB device fits (68% headroom)"));
  r = run(TRAIN + " --dry-run --config " + CONFIGS +
          "llama3_70b.json --set 'parallel.mesh={\"pp\":8,\"dp\":2,\"tp\":8}'");
  CHECK_THAT(r.out, Contains("an 80 GB device fits (77% headroom)"));
  // ZeRO-1 at dp=1 shards nothing: the warning names what it costs (the fp32 copy of a stage's
  // weights, 4.47 GiB = its parameter bytes) and the fix.
  r = run(TRAIN + " --dry-run --config " + CONFIGS + "llama3_70b.json");
  CHECK_THAT(r.out, Contains("warning: ZeRO stage 1 with dp=1 shards nothing and adds 4.47 GiB "
                             "per rank (its fp32 copy of the weights); set parallel.zero=0"));
  CHECK_THAT(r.out, Contains("params 4.47 GiB"));
}

TEST_CASE("the 128K recipe splits each sequence over cp and fits 80 GB with headroom",
          "[train_app]") {
  // 128 ranks: 16 x 8192 tokens of each 131072-token sequence; ZeRO-1 slices over dp x cp (no
  // dp=1 warning); the README's 9.71 GiB row, and 11.93 GiB at cp=8.
  auto r = run(TRAIN + " --dry-run --config " + CONFIGS + "llama3_8b_128k.json");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("mesh: dp=1, cp=16, tp=8 (128 ranks)"));
  CHECK_THAT(r.out, Contains("batch: 8 sequences of 131072 tokens per step"));
  CHECK_THAT(r.out, Contains("context cp=16 (ring, zigzag): 8192 of 131072 tokens per rank"));
  CHECK_THAT(r.out, Contains("peak per rank: 9.71 GiB"));
  CHECK_THAT(r.out, !Contains("warning: ZeRO"));
  r = run(TRAIN + " --dry-run --config " + CONFIGS +
          "llama3_8b_128k.json --set 'parallel.mesh={\"dp\":-1,\"cp\":8,\"tp\":8}'");
  CHECK_THAT(r.out, Contains("peak per rank: 11.93 GiB"));
}

TEST_CASE("vescale-train --dry-run --world-size shows the mesh those ranks form", "[train_app]") {
  // 64 ranks, dp the rest: pp=2 x dp=4 x tp=8, tp inside the 8-GPU nodes; 128 sequences a step
  // (train.batch_size 1 x 32 pipeline micro-batches x 4 data ranks), the README's 6.54 GiB row.
  auto r = run(TRAIN + " --dry-run --config " + CONFIGS +
               "llama3_8b.json --world-size 64 --gpus-per-node 8");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("mesh: pp=2, dp=4, tp=8 (64 ranks; 8 nodes of 8: tp within a node, "
                             "pp, dp across nodes)"));
  CHECK_THAT(r.out, Contains("batch: 128 sequences of 8192 tokens per step (micro-batch 1 x 32 "
                             "micro-batches x 4 data ranks)"));
  CHECK_THAT(r.out, Contains("peak per rank: 6.54 GiB"));
  CHECK_THAT(r.out, !Contains("warning: ZeRO"));  // dp=4: ZeRO-1 shards the optimizer state
  // A world the mesh does not divide is named.
  r = run(TRAIN + " --dry-run --config " + CONFIGS + "llama3_8b.json --world-size 60");
  CHECK(r.code == 2);
  // Outside --dry-run the world comes from the launcher.
  r = run(TRAIN + " --config " + CONFIGS + "nanogpt_tiny.json --world-size 4");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("--world-size and --gpus-per-node describe a world for --dry-run"));
}

TEST_CASE("vescale-train names config errors", "[train_app]") {
  auto r = run(TRAIN + " --dry-run --config " + CONFIGS + "nanogpt_tiny.json --set train.stpes=3");
  CHECK(r.code == 2);  // an input error: launchers that restart ranks do not restart it
  CHECK_THAT(r.out, Contains("train.stpes: unknown key; did you mean train.steps?"));
  r = run(TRAIN + " --config /no/such.json");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("cannot open '/no/such.json'"));
  r = run(TRAIN + " --config " + CONFIGS +
          "nanogpt_tiny.json --set data.train=/no/such_*.bin --set train.steps=1");
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Contains("data.train: '/no/such_*.bin' matches no file"));
}

TEST_CASE(
    "vescale-train shows what it will run: --print-config, shipped configs by name, --set named in "
    "errors",
    "[train_app]") {
  // A shipped config by its bare name; every --set applied, paths resolved.
  auto r = run(TRAIN +
               " --config nanogpt_tiny --print-config --set train.steps=7 "
               "--set data.train=[builtin:corpus_train.bin,builtin:corpus_val.bin]");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto cfg = nlohmann::json::parse(r.out);
  CHECK(cfg["train"]["steps"] == 7);
  CHECK(cfg["model"]["type"] == "gpt");
  CHECK(cfg["data"]["train"] ==
        nlohmann::json::array({"builtin:corpus_train.bin", "builtin:corpus_val.bin"}));
  // The same list as JSON, into a field the file gives as a string.
  const std::string one = "/tmp/vescale_train_app." + std::to_string(::getpid()) + ".json";
  std::ofstream(one) << R"({"model": {"type": "gpt"}, "data": {"train": "a.bin"}})";
  r = run(TRAIN + " --config " + one + " --print-config --set 'data.train=[\"x.bin\",\"y.bin\"]'");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out)["data"]["train"].size() == 2);
  std::remove(one.c_str());
  // A value's error names the --set that gave it, not the file.
  r = run(TRAIN + " --config nanogpt_tiny --print-config --set train.steps=-5");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("vescale-train: --set train.steps=-5: train.steps: must be >= 1"));
  r = run(TRAIN + " --config nanogpt_tiny --print-config --set train.eval_every=often");
  CHECK(r.code == 2);
  CHECK_THAT(r.out,
             Contains("--set train.eval_every=often: train.eval_every: expected an integer"));
  // Source locations only at --log-level debug.
  CHECK_THAT(r.out, !Contains(".cpp:"));
  r = run(TRAIN +
          " --config nanogpt_tiny --print-config --set train.eval_every=often --log-level debug");
  CHECK_THAT(r.out, Contains("config.cpp:") || Contains("json_schema.cpp:"));
  // At debug level the resolved config opens the log.
  r = run(TRAIN +
          " --config nanogpt_tiny --set train.steps=1 --set train.batch_size=1 "
          "--set log.metrics_jsonl= --log-level debug");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("debug config ") && Contains("nanogpt_tiny.json resolved:") &&
                        Contains("\"steps\": 1"));
  // An unknown name lists the shipped configs.
  r = run(TRAIN + " --config nanogpt_huge");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("'nanogpt_huge' is neither a file nor a shipped config") &&
                        Contains("llama_tiny, llama_tiny_bpe, mixtral_8x7b"));
}

TEST_CASE("config and plan errors are found before any rendezvous, the same at 1 rank and at 2",
          "[train_app]") {
  const std::string plan = "/tmp/vescale_train_app." + std::to_string(::getpid()) + ".plan.json";
  std::ofstream(plan) << R"J({"mesh": ["tp"], "params": {"layers.*.atention.wq.weight": ["Shard(0)"],
                              "*": ["Replicate"]}})J";
  const std::string base = TRAIN + " --config llama_tiny --set train.steps=1 --set log.metrics_jsonl=";
  const std::string want = "params['layers.*.atention.wq.weight'] matches no parameter of the model";
  // One process on a one-rank tp mesh, two ranks on two: the same message, and at two ranks no
  // rank formed the mesh (the error came before dist::init).
  auto one = run(base + " --set 'parallel.mesh={\"tp\":1}' --set parallel.plan=\\\"" + plan + "\\\"");
  auto two = run(base + " --nproc-per-node 2 --set 'parallel.mesh={\"tp\":2}' --set parallel.plan=\\\"" + plan +
                 "\\\"");
  INFO(one.out << "\n----\n" << two.out);
  CHECK(one.code == 2);
  CHECK(two.code == 2);
  CHECK_THAT(one.out, Contains(want));
  CHECK_THAT(two.out, Contains("[rank 0] vescale-train: plan '" + plan + "': " + want) &&
                          Contains("[rank 1] vescale-train: plan '" + plan + "': " + want));
  CHECK_THAT(one.out + two.out, !Contains("DeviceMesh("));
  // The pipeline's own refusals come as early.
  auto pp = run(base + " --nproc-per-node 2 --set 'parallel.mesh={\"pp\":2}' --set parallel.plan=\\\"" +
                CONFIGS + "plans/llama_pp.json\\\" --set train.grad_accum=3");
  INFO(pp.out);
  CHECK(pp.code == 2);
  CHECK_THAT(pp.out, Contains("train.grad_accum=3 but plan '") &&
                         Contains("a pipeline's micro-batches are the step's accumulation"));
  CHECK_THAT(pp.out, !Contains("DeviceMesh("));
  std::remove(plan.c_str());
}

namespace {
std::vector<double> losses_of(const std::string& jsonl) {
  std::ifstream f(jsonl);
  std::vector<double> out;
  for (std::string line; std::getline(f, line);)
    out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  std::remove(jsonl.c_str());
  return out;
}

// Runs vescale-train for each entry; every run's losses equal the first's within 1e-5 relative.
struct PlanRun {
  int ranks;
  std::string mesh, plan;
  int batch;
};
void check_runs_match_the_first(const std::string& common, const std::vector<PlanRun>& runs) {
  std::vector<double> reference;
  for (const auto& r : runs) {
    const std::string jsonl = "/tmp/vescale_plans." + std::to_string(::getpid()) + ".jsonl";
    auto res = run(TRAIN + common + "--nproc-per-node " + std::to_string(r.ranks) +
                   " --set 'parallel.mesh=" + r.mesh + "' --set 'parallel.plan=\"" + r.plan +
                   "\"' --set train.batch_size=" + std::to_string(r.batch) +
                   " --set log.metrics_jsonl=" + jsonl);
    INFO(r.mesh << " " << r.plan << "\n" << res.out);
    REQUIRE(res.code == 0);
    auto losses = losses_of(jsonl);
    REQUIRE(losses.size() == 8);
    if (reference.empty()) {
      reference = losses;
      CHECK(losses.back() < losses.front());
      continue;
    }
    for (size_t i = 0; i < losses.size(); ++i) {
      INFO("step " << i + 1 << ": " << losses[i] << " vs world 1 " << reference[i]);
      CHECK(std::abs(losses[i] - reference[i]) <= 1e-5 * std::abs(reference[i]));
    }
  }
}
}  // namespace

TEST_CASE("vescale-train applies the config's plan on any mesh and trains like world 1",
          "[train_app]") {
  // The same global batch (4 sequences) everywhere: dp ranks take 4 / dp each.
  const std::string common = " --config " + CONFIGS +
                             "llama_tiny.json --set train.steps=8 --set train.seq_len=64 " +
                             "--set train.warmup_steps=2 --set train.log_every=4 ";
  check_runs_match_the_first(common, {{1, R"({"dp":1})", "", 4},
                                      {2, R"({"tp":2})", "plans/llama_tp.json", 4},
                                      {2, R"({"tp":2})", "plans/llama_tp_sp.json", 4},
                                      {4, R"({"tp":4})", "plans/llama_tp.json", 4},
                                      {4, R"({"dp":2,"tp":2})", "plans/llama_dp_tp.json", 2}});
}

TEST_CASE(
    "vescale-train under the shipped pipeline plans trains like world 1 with the true loss "
    "in rank 0's log",
    "[train_app]") {
  // The plans' 8 micro-batches are world 1's 8 accumulated batches.
  const std::string common =
      " --config " + CONFIGS + "llama_tiny.json --set train.steps=8 --set train.seq_len=32 " +
      "--set train.warmup_steps=2 --set train.log_every=4 " + "--set train.grad_accum=8 ";
  check_runs_match_the_first(common, {{1, R"({"dp":1})", "", 2},
                                      {2, R"({"pp":2})", "plans/llama_pp.json", 2},
                                      {4, R"({"pp":2,"dp":2})", "plans/llama_pp_dp.json", 1}});
  auto r = run(
      TRAIN + " --config " + CONFIGS +
      "llama_tiny.json --set 'parallel.mesh={\"pp\":4}' --set parallel.plan=plans/llama_pp.json "
      "--print-schedule");
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("pipeline schedule 1f1b: 4 ranks, 4 stages") &&
                        Contains("bubble 27.3% simulated, 27.3% textbook"));
}
