// vescale-run driven as a user drives it: real processes, real exit codes and signals.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/run_command.h"
#include "vescale/common/check.h"
#include "vescale/tokenizer/byte_tokenizer.h"
#include "vescale/train/token_data.h"

namespace {

using Result = vescale::testing::CommandResult;
using vescale::testing::slurp;
Result run(const std::string& cmd) { return vescale::testing::run_command(cmd); }

const std::string RUN = VESCALE_RUN;
const std::string FAULT = FAULT_RANK;
const std::string TRAIN = VESCALE_TRAIN;
const std::string TOKENIZE = VESCALE_TOKENIZE;

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = "/tmp/vescale_launcher_test." + std::to_string(::getpid()) + "." + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

using Catch::Matchers::Contains;

TEST_CASE("every output line is prefixed with its rank", "[launcher]") {
  auto r = run(RUN + " --nproc-per-node 3 -- " + FAULT + " echo");
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  for (int k = 0; k < 3; ++k) {
    CHECK_THAT(r.out,
               Contains("[rank " + std::to_string(k) + "] hello from " + std::to_string(k) + "\n"));
    CHECK_THAT(r.err,
               Contains("[rank " + std::to_string(k) + "] note from " + std::to_string(k) + "\n"));
  }
}

TEST_CASE("arguments after -- reach the ranks verbatim", "[launcher]") {
  auto r = run(RUN + " --nproc-per-node 1 -- echo \"[any],[world2]\" --flag");
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("[rank 0] [any],[world2] --flag"));
}

TEST_CASE("one rank exiting 3 stops the others within seconds", "[launcher]") {
  auto r = run(RUN + " --nproc-per-node 3 --grace-seconds 2 -- " + FAULT + " exit 1 3");
  INFO(r.out << r.err);
  CHECK(r.code == 3);
  CHECK(r.seconds <
        60);  // the others sleep 120 s unless stopped (a loaded machine starts ranks slowly)
  CHECK_THAT(r.err, Contains("rank 1"));
  CHECK_THAT(r.err, Contains("exit code 3"));
}

TEST_CASE("a rank stuck before a collective makes the job fail at the timeout", "[launcher]") {
  auto r = run("VESCALE_COLLECTIVE_TIMEOUT_S=3 " + RUN +
               " --nproc-per-node 2 --grace-seconds 1 -- " + FAULT + " stall 1");
  INFO(r.out << r.err);
  CHECK(r.code != 0);
  CHECK(r.seconds >= 3);
  CHECK(r.seconds < 60);  // unstopped, it would hang forever
  CHECK_THAT(r.err, Contains("[rank 0] TimeoutError"));
  CHECK_THAT(r.err, Contains("did not finish within 3000 ms"));
}

TEST_CASE("SIGTERM to the launcher reaches every rank", "[launcher]") {
  // Signal once both ranks are up (a fixed sleep raced slow starts on a loaded machine); the
  // job must then end within seconds.
  auto r = run("out=$(mktemp); " + RUN + " --nproc-per-node 2 -- " + FAULT +
               " wait > $out 2>&1 & pid=$!; for i in $(seq 600); do [ $(grep -c ready $out) -ge 2 "
               "] && break; "
               "sleep 0.1; done; t0=$(date +%s); kill -TERM $pid; wait $pid; rc=$?; "
               "echo \"stopped after $(( $(date +%s) - t0 )) s\"; cat $out; rm -f $out; exit $rc");
  INFO(r.out << r.err);
  CHECK(r.code == 128 + 15);
  CHECK_THAT(r.out, Contains("stopped after 0 s") || Contains("stopped after 1 s") ||
                        Contains("stopped after 2 s") || Contains("stopped after 3 s") ||
                        Contains("stopped after 4 s"));
  CHECK_THAT(r.out, Contains("[rank 0] ready"));
  CHECK_THAT(r.out, Contains("[rank 1] ready"));
}

TEST_CASE("bad launcher flags are named", "[launcher]") {
  auto r = run(RUN + " --nproc-per-node 0 -- true");
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Contains("--nproc-per-node"));
  CHECK_THAT(
      r.err,
      Contains(
          "'0' must be a whole number, at least 1 (the number of ranks to start on this node)"));
  CHECK_THAT(r.err, !Contains("1797693"));  // not CLI11's range of doubles
  r = run(RUN + " --nnodes 2 --node-rank 0 -- true");
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Contains("needs --master-addr"));
  r = run(RUN + " --nproc-per-node 1 -- /nonexistent/prog");
  CHECK(r.code == 127);
  CHECK_THAT(r.err, Contains("cannot run '/nonexistent/prog'"));
}

TEST_CASE(
    "with --max-restarts the launcher starts every rank again after one fails, up to its count",
    "[launcher]") {
  // Rank 1 fails in the first round only: one restart, then every rank succeeds.
  const auto flaky =
      write_temp("flaky.sh",
                 "echo round $VESCALE_ROUND restart $VESCALE_RESTART of $VESCALE_MAX_RESTARTS\n"
                 "[ $RANK = 1 ] && [ $VESCALE_RESTART = 0 ] && exit 3\nexit 0\n");
  auto r = run(RUN + " --nproc-per-node 2 --max-restarts 1 -- sh " + flaky);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Contains("vescale-run: restart 1/1 after rank 1 (pid "));
  CHECK_THAT(r.err, Contains(") failed with exit code 3; no checkpoint yet: starting over"));
  CHECK_THAT(r.out, Contains("[rank 1] round 0 restart 0 of 1"));
  CHECK_THAT(r.out, Contains("[rank 1] round 1 restart 1 of 1"));

  // Always failing: 1 + 2 rounds, then the failing rank's code.
  const auto failing = write_temp("failing.sh", "[ $RANK = 0 ] && exit 5\nsleep 5\n");
  r = run(RUN + " --nproc-per-node 2 --max-restarts 2 -- sh " + failing);
  INFO(r.out << r.err);
  CHECK(r.code == 5);
  CHECK_THAT(r.err, Contains("restart 2/2 after rank 0"));
  CHECK_THAT(r.err, !Contains("restart 3/"));
  CHECK_THAT(r.err, Contains("failed with exit code 5; no restart left (--max-restarts 2)"));

  // Exit 2 says the input is wrong: never restarted.
  const auto wrong = write_temp("wrong.sh", "exit 2\n");
  r = run(RUN + " --nproc-per-node 2 --max-restarts 3 -- sh " + wrong);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("not restarting: rank "));
  CHECK_THAT(r.err, !Contains("restart 1/"));
  for (const auto& f : {flaky, failing, wrong}) std::remove(f.c_str());

  // Bad values are named.
  r = run(RUN + " --nnodes 3:2 -- true");
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Contains("'3:2': MIN must not exceed MAX"));
  r = run(RUN + " --nnodes 1:x -- true");
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Contains("must be a number of nodes (at least 1) or MIN:MAX"));
}

TEST_CASE("vescale-train starts its own ranks with the launcher flags", "[launcher]") {
  auto cfg = write_temp("mesh.json", R"({"parallel": {"mesh": {"dp": 2, "tp": 2}}})");
  auto r = run(TRAIN + " --nproc-per-node 4 --dry-run --config " + cfg);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(
      r.out,
      Contains("[rank 0] DeviceMesh(dp=2, tp=2; rank 0 at [0, 0]) (launched by vescale-run"));
  CHECK_THAT(r.out, Contains("[rank 3] DeviceMesh(dp=2, tp=2; rank 3 at [1, 1])"));

  // --set overrides a field; unknown keys and wrong types are named.
  r = run(TRAIN + " --nproc-per-node 4 --dry-run --config " + cfg +
          " --set parallel.mesh.dp=4 --set parallel.mesh.tp=1");
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("[rank 3] DeviceMesh(dp=4, tp=1; rank 3 at [3, 0])"));
  r = run(TRAIN + " --dry-run --config " + cfg + " --set parallel.mesh.pp=2");
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Contains("has no key 'parallel.mesh.pp'"));
  r = run(TRAIN + " --dry-run --config " + cfg + " --set parallel.mesh.dp=two");
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Contains("the config has a number there, not a string"));

  auto bad = write_temp("bad.json", R"({"parallel": {"mesh": {"dp": 3}}})");
  r = run(TRAIN + " --nproc-per-node 2 --dry-run --config " + bad);
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Contains("has 3 devices but the world has 2 ranks"));
  std::remove(cfg.c_str());
  std::remove(bad.c_str());
}

TEST_CASE("ranks share the cores unless OMP_NUM_THREADS says otherwise, and ps names them",
          "[launcher]") {
  // The cores this process may use, shared by 2 local ranks (at least 1 each).
  const int cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  const std::string share = std::to_string(std::max(1, cores / 2));
  // vescale-run passes OMP_NUM_THREADS on to any program, as torchrun does.
  auto r = run("env -u OMP_NUM_THREADS " + RUN +
               " --nproc-per-node 2 -- bash -c \"echo threads=\\$OMP_NUM_THREADS\"");
  INFO(r.out << r.err);
  CHECK_THAT(r.out, Contains("[rank 0] threads=" + share) && Contains("[rank 1] threads=" + share));
  r = run("OMP_NUM_THREADS=3 " + RUN +
          " --nproc-per-node 2 -- bash -c \"echo threads=\\$OMP_NUM_THREADS\"");
  CHECK_THAT(r.out, Contains("[rank 0] threads=3") && Contains("[rank 1] threads=3"));
  // vescale-train's ranks log their count, and run as vescale-train[rank k], not exe.
  const std::string dir = "/tmp/vescale_launcher_test." + std::to_string(::getpid()) + ".threads";
  std::filesystem::create_directories(dir);
  const std::string train =
      TRAIN + " --nproc-per-node 2 --config " VESCALE_SOURCE_DIR
              "/configs/llama_tiny.json --set train.batch_size=2 "
              "--set train.seq_len=32 --set train.log_every=1 --set log.metrics_jsonl=";
  r = vescale::testing::run_command(
      "env -u OMP_NUM_THREADS " + train + " --set train.steps=1000000 > " + dir +
          "/log 2>&1 & pid=$!; for i in $(seq 600); do grep -qE \"step +2/\" " + dir +
          "/log && break; sleep 0.1; done; for p in $(pgrep -P $pid); do "
          "echo \"comm $(cat /proc/$p/comm) args $(tr \"\\0\" \" \" < /proc/$p/cmdline | cut "
          "-c1-40)\"; "
          "done; kill $pid; wait $pid",
      120);
  const std::string log = slurp(dir + "/log");
  INFO(r.out << r.err << log);
  CHECK_THAT(r.out, Contains("comm vescale-train args vescale-train[rank 0] --nproc-per-node") &&
                        Contains("comm vescale-train args vescale-train[rank 1] --nproc-per-node"));
  CHECK_THAT(log, Contains("[rank 0] DeviceMesh(dp=2; rank 0 at [0]) (launched by vescale-run, "
                           "device cpu, " +
                           share + " intra-op thread"));
  CHECK_THAT(log, Contains("[rank 1] DeviceMesh(dp=2; rank 1 at [1])"));
  r = run("OMP_NUM_THREADS=2 " + train + " --set train.steps=1");
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("device cpu, 2 intra-op threads)"));
  std::filesystem::remove_all(dir);
}

// (loss, grad_norm) of every step in a metrics JSONL file; with `param_norms`, theirs too.
std::vector<std::pair<double, double>> read_metrics(const std::string& path,
                                                    std::vector<double>* param_norms = nullptr) {
  std::vector<std::pair<double, double>> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    auto field = [&](const std::string& key) {
      const auto at = line.find("\"" + key + "\":");
      REQUIRE(at != std::string::npos);
      return std::stod(line.substr(at + key.size() + 3));
    };
    out.emplace_back(field("loss"), field("grad_norm"));
    if (param_norms) param_norms->push_back(field("param_norm"));
  }
  return out;
}

TEST_CASE("vescale-train at DP=2: ZeRO 1, 2 and 3 train like ZeRO 0, bf16 reduction close, "
          "parameter norm as on one process",
          "[launcher]") {
  const std::string config = std::string(VESCALE_SOURCE_DIR "/configs/nanogpt_tiny.json");
  const std::string small =
      " --set train.steps=6 --set train.batch_size=4 --set train.seq_len=64 --set "
      "train.log_every=3";
  std::vector<double> param_norms;  // of the last run
  auto train = [&](std::string extra, int ranks = 2) {
    static int n = 0;
    const std::string metrics = write_temp("zero" + std::to_string(n++) + ".jsonl", "");
    auto r = run(TRAIN + (ranks > 1 ? " --nproc-per-node " + std::to_string(ranks) : "") +
                 " --config " + config + small + " --set log.metrics_jsonl=" + metrics + extra);
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    param_norms.clear();
    auto m = read_metrics(metrics, &param_norms);
    std::remove(metrics.c_str());
    REQUIRE(m.size() == 6);
    return m;
  };
  // The weights' norm is the whole model's on any layout: one process with the same global
  // batch starts from the same weights.
  train(" --set train.batch_size=8", 1);
  const std::vector<double> one_process = param_norms;
  const auto base = train("");
  CHECK(base.back().first < base.front().first);
  auto check_param_norms = [&](const std::string& what) {
    for (size_t i = 0; i < one_process.size(); ++i) {
      INFO(what << " step " << i + 1 << ": param_norm " << param_norms[i] << " vs one process "
                << one_process[i]);
      CHECK(std::abs(param_norms[i] - one_process[i]) <= 1e-5 * one_process[i]);
    }
  };
  check_param_norms("ZeRO-0");
  for (const char* extra :
       {" --set parallel.zero=1", " --set parallel.zero=2", " --set parallel.zero=3",
        " --set parallel.zero=3 --set train.activation_checkpointing=true"}) {
    const auto got = train(extra);
    check_param_norms(extra);
    for (size_t i = 0; i < base.size(); ++i) {
      INFO(extra << " step " << i + 1 << ": loss " << got[i].first << " vs " << base[i].first
                 << ", norm " << got[i].second << " vs " << base[i].second);
      CHECK(std::abs(got[i].first - base[i].first) <= 1e-5 * base[i].first);
      CHECK(std::abs(got[i].second - base[i].second) <= 1e-5 * base[i].second);
    }
  }
  // bf16 on the wire rounds each gradient to 8 bits of mantissa: close, not equal.
  const auto bf16 = train(" --set parallel.zero=2 --set parallel.reduce_dtype=bf16");
  for (size_t i = 0; i < base.size(); ++i) {
    INFO("bf16 reduction step " << i + 1 << ": loss " << bf16[i].first << " vs " << base[i].first);
    CHECK(std::abs(bf16[i].first - base[i].first) <= 2e-2 * base[i].first);
    CHECK(std::abs(bf16[i].second - base[i].second) <= 5e-2 * base[i].second);
  }
  CHECK(bf16.back().second != base.back().second);

  // The stage can come from the plan too; a config that disagrees with it is an error.
  const auto plan = write_temp("zero_plan.json",
                               R"({"mesh": ["dp"], "params": {"*": ["Replicate"]}, "zero": 3})");
  const auto from_plan = train(" --set parallel.plan=" + plan);
  for (size_t i = 0; i < base.size(); ++i)
    CHECK(std::abs(from_plan[i].first - base[i].first) <= 1e-5 * base[i].first);
  auto r = run(TRAIN + " --nproc-per-node 2 --config " + config + small +
               " --set parallel.plan=" + plan + " --set parallel.zero=1");
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Contains("parallel.zero=1 but the plan") && Contains("says zero=3"));
  std::remove(plan.c_str());

  r = run(TRAIN + " --nproc-per-node 2 --config " + config + small +
          " --set parallel.zero=1 --set parallel.grad_reduce=per_param");
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Contains("parallel.zero") && Contains("grad_reduce to overlap or bucketed"));
}

TEST_CASE("vescale-train checkpoints under TP=2 and resumes bitwise, and resharded under DP=2",
          "[launcher]") {
  const std::string dir = "/tmp/vescale_launcher_test." + std::to_string(::getpid()) + ".ckpt";
  std::filesystem::remove_all(dir);
  const std::string common =
      TRAIN + " --nproc-per-node 2 --config " VESCALE_SOURCE_DIR "/configs/nanogpt_tiny.json" +
      " --set train.steps=6 --set model.n_layer=2 --set train.seq_len=64" +
      " --set checkpoint.every=2 --set checkpoint.dir=" + dir;
  // run() wraps the command in bash -c '...': the JSON's quotes are backslash-escaped.
  const std::string tp =
      " --set train.batch_size=4 --set parallel.mesh={\\\"tp\\\":2}" +
      std::string(" --set parallel.plan=" VESCALE_SOURCE_DIR "/configs/plans/gpt2_tp.json");
  auto train = [&](const std::string& extra, const std::string& metrics) {
    auto r = run(common + " --set log.metrics_jsonl=" + metrics + extra);
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    return r;
  };
  const std::string full_metrics = dir + "_full.jsonl", resumed_metrics = dir + "/resumed.jsonl";
  train(tp, full_metrics);
  const auto full = read_metrics(full_metrics);
  REQUIRE(full.size() == 6);
  for (int s : {2, 4, 6})
    CHECK(std::filesystem::exists(dir + "/step-0000000" + std::to_string(s) + "/index.json"));

  // As if the run had died after step 4: the same command continues from there, bitwise.
  std::ofstream(dir + "/latest") << "step-00000004\n";
  std::filesystem::copy_file(full_metrics, resumed_metrics);
  auto r = train(tp, resumed_metrics);
  CHECK_THAT(r.out + r.err, Contains("resumed from") && Contains("after step 4"));
  const auto resumed = read_metrics(resumed_metrics);
  REQUIRE(resumed.size() == 6);
  for (size_t i = 0; i < 6; ++i) {
    INFO("step " << i + 1);
    CHECK(resumed[i] == full[i]);
  }

  // The TP=2 checkpoint loads into DP=2 with the same global batch (2 x 2): the same run within
  // 1e-5.
  std::ofstream(dir + "/latest") << "step-00000004\n";
  const std::string dp_metrics = dir + "_dp.jsonl";
  r = train(" --set train.batch_size=2 --set parallel.mesh={\\\"dp\\\":2}", dp_metrics);
  const auto dp = read_metrics(dp_metrics);
  REQUIRE(dp.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    INFO("step " << i + 5 << ": loss " << dp[i].first << " vs " << full[4 + i].first);
    CHECK(std::abs(dp[i].first - full[4 + i].first) <= 1e-5 * full[4 + i].first);
    CHECK(std::abs(dp[i].second - full[4 + i].second) <= 1e-5 * full[4 + i].second);
  }
  std::filesystem::remove_all(dir);
  std::remove(full_metrics.c_str());
  std::remove(dp_metrics.c_str());
}

TEST_CASE(
    "vescale-train under ZeRO 1, 2 and 3 resumes bitwise, and ZeRO and plain checkpoints load into "
    "each other",
    "[launcher]") {
  const std::string dir = "/tmp/vescale_launcher_test." + std::to_string(::getpid()) + ".zckpt";
  const std::string common =
      TRAIN + " --nproc-per-node 2 --config " VESCALE_SOURCE_DIR "/configs/nanogpt_tiny.json" +
      " --set train.steps=6 --set model.n_layer=2 --set train.seq_len=64 --set train.batch_size=2" +
      " --set checkpoint.every=2 --set checkpoint.dir=" + dir;
  auto train = [&](const std::string& extra, const std::string& metrics) {
    auto r = run(common + " --set log.metrics_jsonl=" + metrics + extra);
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    return read_metrics(metrics);
  };
  const std::string m = dir + ".jsonl";
  for (int zero : {1, 2, 3}) {
    INFO("zero " << zero);
    std::filesystem::remove_all(dir);
    const std::string z = " --set parallel.zero=" + std::to_string(zero);
    const auto full = train(z, m);
    REQUIRE(full.size() == 6);
    std::ofstream(dir + "/latest") << "step-00000004\n";
    std::filesystem::remove(m);
    const auto resumed = train(z, m);  // steps 5 and 6 from the checkpoint
    REQUIRE(resumed.size() == 2);
    for (size_t i = 0; i < 2; ++i) {
      INFO("step " << i + 5);
      CHECK(resumed[i] == full[4 + i]);
    }
    // The same checkpoint without ZeRO: AdamW's moments from the slices, close (other reductions).
    std::ofstream(dir + "/latest") << "step-00000004\n";
    std::filesystem::remove(m);
    const auto plain = train(" --set parallel.zero=0", m);
    REQUIRE(plain.size() == 2);
    for (size_t i = 0; i < 2; ++i) {
      INFO("step " << i + 5 << " without ZeRO: loss " << plain[i].first << " vs "
                   << full[4 + i].first);
      CHECK(std::abs(plain[i].first - full[4 + i].first) <= 1e-5 * full[4 + i].first);
      CHECK(std::abs(plain[i].second - full[4 + i].second) <= 1e-5 * full[4 + i].second);
    }
  }
  // A plain checkpoint resumed under ZeRO-2.
  std::filesystem::remove_all(dir);
  std::filesystem::remove(m);
  const auto full = train("", m);
  std::ofstream(dir + "/latest") << "step-00000004\n";
  std::filesystem::remove(m);
  const auto zero2 = train(" --set parallel.zero=2", m);
  REQUIRE(zero2.size() == 2);
  for (size_t i = 0; i < 2; ++i)
    CHECK(std::abs(zero2[i].first - full[4 + i].first) <= 1e-5 * full[4 + i].first);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(m);
}

TEST_CASE("vescale-tokenize writes train and val shards of bytes", "[launcher]") {
  const std::string text = "hello, vescale!\nbytes in, bytes out.\n";
  auto in = write_temp("text.txt", text);
  auto prefix = "/tmp/vescale_launcher_test." + std::to_string(::getpid()) + ".corpus";
  auto r = run(TOKENIZE + " --input " + in + " --output " + prefix + " --val-fraction 0.25");
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  vescale::train::TokenDataset train({prefix + "_train.bin"}), val({prefix + "_val.bin"});
  const int64_t n_val = static_cast<int64_t>(text.size() * 0.25);
  CHECK(val.size() == n_val);
  CHECK(train.size() + val.size() == static_cast<int64_t>(text.size()));
  std::vector<int64_t> all(text.size());
  train.copy(0, train.size(), all.data());
  val.copy(0, val.size(), all.data() + train.size());
  CHECK(vescale::tokenizer::ByteTokenizer::decode(all) == text);
  CHECK_THROWS_WITH(vescale::tokenizer::ByteTokenizer::decode({300}),
                    Contains("token 300 at position 0 is not a byte"));
  r = run(TOKENIZE + " --input /nonexistent.txt --output " + prefix);
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Contains("/nonexistent.txt"));
  for (auto p : {in, prefix + "_train.bin", prefix + "_val.bin"}) std::remove(p.c_str());
}
