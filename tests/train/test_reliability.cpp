// vescale-train under the faults an operator meets: data for another vocabulary, a killed
// launcher, an unwritable folder, a diverging run, a foreign program on the rendezvous port, a
// used checkpoint folder, SIGTERM / SIGINT, stale unfinished saves, and messages. Each case runs
// the CLI as a user would (real processes) and checks the exit code, the time and the message.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "common/run_command.h"
#include "vescale/dist/launcher.h"
#include "vescale/tokenizer/token_file.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using vescale::testing::CommandResult;
using vescale::testing::run_command;
using vescale::testing::slurp;

namespace {

const std::string TRAIN = VESCALE_TRAIN;
const std::string CONFIG = " --config " VESCALE_SOURCE_DIR "/configs/llama_tiny.json";
const std::string PLANS = VESCALE_SOURCE_DIR "/configs/plans/";
// llama_tiny at toy shapes: a step takes milliseconds.
const std::string TINY =
    " --set train.batch_size=2 --set train.seq_len=32 --set train.log_every=1"
    " --set log.metrics_jsonl=";
// Inside run_command's bash -c '...': JSON quotes are backslash-escaped.
const std::string TP2 =
    " --nproc-per-node 2 --set parallel.mesh={\\\"tp\\\":2} --set parallel.plan=" + PLANS +
    "llama_tp.json";

// A fresh folder for one test case.
std::string scratch(const std::string& name) {
  const std::string dir = "/tmp/vescale_reliability." + std::to_string(::getpid()) + "." + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string latest(const std::string& ckpt) {
  std::string s = slurp(ckpt + "/latest");
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// No libtorch C++ stack in what a user sees.
void check_no_stack(const CommandResult& r) {
  CHECK_THAT(r.out + r.err, !Contains("Exception raised from") && !Contains("frame #"));
}

// (step, loss, grad_norm) per line of a metrics JSONL.
std::vector<std::tuple<int64_t, double, double>> metrics(const std::string& path) {
  std::vector<std::tuple<int64_t, double, double>> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    out.emplace_back(j["step"].get<int64_t>(), j["loss"].get<double>(),
                     j["grad_norm"].get<double>());
  }
  return out;
}

// Runs a 2-rank vescale-train with a 5 s collective timeout and these `args`, freezes its last
// rank with SIGSTOP once step 2 is logged (the others then wait on it), and waits for the run;
// stdout says "exit <code>", `log` holds the run's output.
CommandResult run_and_freeze_last_rank(const std::string& args, const std::string& log) {
  return run_command(
      // A short collective timeout; the rendezvous keeps a long one (a loaded machine may take
      // longer than 5 s to start both ranks: CI saw it).
      "VESCALE_COLLECTIVE_TIMEOUT_S=5 VESCALE_RENDEZVOUS_TIMEOUT_S=120 " + TRAIN +
          " --nproc-per-node 2" + CONFIG + TINY + args + " --set train.steps=1000000 > " + log +
          " 2>&1 & pid=$!; for i in $(seq 600); do grep -qE \"step +2/\" " + log +
          " && break; sleep 0.1; done; " +
          // The launcher's newest child is the last rank; on a loaded machine one pgrep can come
          // back empty (CI saw it once), so ask again before giving up.
          "for i in $(seq 50); do kid=$(pgrep -P $pid | sort -n | tail -1); [ -n \"$kid\" ] && "
          "break; sleep 0.1; done; kill -STOP $kid; wait $pid; echo \"exit $?\"",
      120);
}

}  // namespace

TEST_CASE("token ids past model.vocab_size stop the run at their batch, naming the file and the id",
          "[reliability]") {
  const std::string dir = scratch("oov");
  // GPT-2-sized ids (uint16) fed to a 256-token model.
  const std::string oov = dir + "/oov.bin";
  vescale::tokenizer::write_token_file(oov, std::vector<int64_t>(4000, 65000));
  const std::string args = CONFIG + TINY + " --set train.steps=3 --set data.train=" + oov;
  for (const std::string& launch : {std::string(), std::string(" --nproc-per-node 2"), TP2}) {
    INFO("launch:" << launch);
    auto r = run_command(TRAIN + launch + args);
    INFO(r.out << r.err);
    CHECK(r.code == 1);
    CHECK(r.seconds < 60);
    CHECK_THAT(r.err, Contains("step 1: reading the batch: data: '" + oov +
                               "' holds token id 65000 (token "));
    CHECK_THAT(r.err, Contains("outside model.vocab_size = 256"));
    CHECK_THAT(r.out,
               !Contains("step 1/3"));  // before it trained on anything (TP=2 gave loss 0.0000)
    check_no_stack(r);
  }
  // 2% bad ids (with TP=2 these trained normally-looking): found in the batch that holds one.
  std::vector<int64_t> mixed(4000);
  for (size_t i = 0; i < mixed.size(); ++i)
    mixed[i] = i % 50 == 7 ? 300 : static_cast<int64_t>(i % 256);
  const std::string some = dir + "/some_oov.bin";
  vescale::tokenizer::write_token_file(some, mixed);
  auto r =
      run_command(TRAIN + TP2 + CONFIG + TINY + " --set train.steps=3 --set data.train=" + some);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Contains("' holds token id 300 (token ") &&
                        Contains("set model.vocab_size to at least 301"));
  fs::remove_all(dir);
}

TEST_CASE("kill -9 of the launcher takes its ranks with it and latest stops moving",
          "[reliability]") {
  const std::string dir = scratch("kill9"), ckpt = dir + "/ckpt";
  // Ranks are the launcher's children: their pids, then SIGKILL to the launcher alone. A rank
  // counts as alive while /proc shows it in any state but zombie (dead, not yet reaped).
  auto r = run_command(
      TRAIN + " --nproc-per-node 2" + CONFIG + TINY +
          " --set train.steps=1000000 --set checkpoint.every=2 --set checkpoint.dir=" + ckpt +
          " > " + dir +
          "/log 2>&1 & pid=$!; "
          "for i in $(seq 600); do [ -f " +
          ckpt +
          "/latest ] && break; sleep 0.1; done; "
          "ranks=$(pgrep -P $pid); echo \"ranks $ranks\"; kill -9 $pid; "
          "for i in $(seq 20); do alive=0; for p in $ranks; do "
          "st=$(awk \"/^State/{print \\$2}\" /proc/$p/status 2>/dev/null); "
          "[ -n \"$st\" ] && [ \"$st\" != Z ] && alive=1; done; "
          "[ $alive = 0 ] && break; sleep 0.1; done; echo \"alive $alive after $i\"; "
          "cp " +
          ckpt + "/latest " + dir + "/latest.at_kill; sleep 2",
      120);
  INFO(r.out << r.err << slurp(dir + "/log"));
  CHECK_THAT(r.out, Contains("ranks "));
  CHECK(r.out.find("ranks \n") == std::string::npos);  // it found the two ranks
  CHECK_THAT(r.out, Contains("alive 0 after"));        // all gone within 2 s
  CHECK_FALSE(latest(ckpt).empty());
  CHECK(slurp(dir + "/latest.at_kill") == slurp(ckpt + "/latest"));  // nobody kept saving
  fs::remove_all(dir);
}

TEST_CASE("an unwritable checkpoint.dir or metrics path fails before step 1", "[reliability]") {
  const std::string dir = scratch("unwritable");
  std::ofstream(dir + "/a_file") << "x";
  for (const std::string& bad : {std::string("/proc/vescale_no_such_dir"), dir + "/a_file/ckpt"}) {
    INFO(bad);
    for (const std::string& launch : {std::string(), std::string(" --nproc-per-node 2")}) {
      auto r = run_command(TRAIN + launch + CONFIG + TINY +
                           " --set train.steps=3 --set checkpoint.dir=" + bad);
      INFO(r.out << r.err);
      CHECK(r.code == 1);
      CHECK_THAT(r.err, Contains("checkpoint.dir '" + bad + "' cannot be created"));
      CHECK_THAT(r.out, !Contains("step 1/3"));
    }
  }
  auto r = run_command(TRAIN + CONFIG + TINY +
                       " --set train.steps=3 --set log.metrics_jsonl=/proc/vescale_x/m.jsonl");
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Contains("log.metrics_jsonl's folder '/proc/vescale_x' cannot be created"));
  CHECK_THAT(r.out, !Contains("step 1/3"));
  fs::remove_all(dir);
}

TEST_CASE("the divergence guard keeps the last good checkpoint as latest", "[reliability]") {
  const std::string dir = scratch("diverge"), ckpt = dir + "/ckpt";
  const std::string base =
      TRAIN + CONFIG + TINY + " --set checkpoint.every=1 --set checkpoint.dir=" + ckpt;
  auto r = run_command(base + " --set train.steps=4");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  REQUIRE(latest(ckpt) == "step-00000004");
  // lr 1e6: step 5's update blows the model up; step 6's loss or norm gives it away, and the
  // step-5 checkpoint (the poisoned parameters) must not become latest.
  r = run_command(base + " --set train.steps=12 --set train.lr=1e6");
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Contains("step 6: the "));
  CHECK_THAT(
      r.err,
      Contains(
          "the checkpoint before this step does not become latest. Lower train.lr (now 1e+06)"));
  CHECK_THAT(r.err, !Contains("train.grad_clip"));  // it is on (1.0): not the knob to turn
  CHECK(latest(ckpt) == "step-00000004");
  CHECK_FALSE(fs::exists(ckpt + "/step-00000005"));
  // A rerun with a sane lr resumes from the good one.
  r = run_command(base + " --set train.steps=6");
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out + r.err, Contains("after step 4"));
  CHECK(latest(ckpt) == "step-00000006");
  fs::remove_all(dir);
}

TEST_CASE("a foreign program on MASTER_PORT is an error within the timeout, not a hang",
          "[reliability]") {
  const int port = vescale::dist::find_free_port();
  const std::string p = std::to_string(port);
  const std::string server = "python3 -m http.server " + p +
                             " --bind 127.0.0.1 >/dev/null 2>&1 & srv=$!; "
                             "for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/" +
                             p + ") 2>/dev/null && break; sleep 0.1; done; ";
  const std::string env =
      "VESCALE_COLLECTIVE_TIMEOUT_S=5 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + p;
  // A rank that connects: the listener accepts and never answers the store's handshake.
  auto r = run_command(
      server + env + " RANK=1 " + TRAIN + CONFIG + TINY + "; rc=$?; kill $srv; exit $rc", 60);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK(r.seconds < 30);
  // The listener either stays silent or answers with something else (http.server may reply to
  // the handshake bytes with an error page): either way the store is named as not ours.
  CHECK_THAT(r.err, Contains("rendezvous: rank 1 connected to 127.0.0.1:" + p + " but it"));
  CHECK_THAT(r.err, Contains("it is not a vescale (c10d) store"));
  // Rank 0 cannot serve there: said at once, without a timeout or libtorch's stack.
  r = run_command(
      server + env + " RANK=0 " + TRAIN + CONFIG + TINY + "; rc=$?; kill $srv; exit $rc", 60);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK(r.seconds < 20);
  CHECK_THAT(r.err, Contains("rank 0 cannot serve the store on port " + p +
                             ": another program is listening there"));
  CHECK_THAT(r.err, !Contains("within"));
  check_no_stack(r);
}

TEST_CASE("resume=false on a used checkpoint.dir is an error, and overwrite keeps the other run's",
          "[reliability]") {
  const std::string dir = scratch("used"), ckpt = dir + "/ckpt";
  const std::string base = TRAIN + CONFIG + TINY + " --set checkpoint.dir=" + ckpt;
  auto r = run_command(base + " --set train.steps=4 --set checkpoint.every=2");
  REQUIRE(r.code == 0);
  r = run_command(base + " --set train.steps=3 --set checkpoint.resume=false");
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Contains("checkpoint.dir '" + ckpt + "' already holds checkpoints (latest: " +
                             ckpt + "/step-00000004) and checkpoint.resume is false") &&
                        Contains("set checkpoint.overwrite=true"));
  CHECK_THAT(r.out, !Contains("step 1/3"));
  // overwrite: the new run's step 3 goes beside the old run's 2 and 4; keep=1 prunes only its own.
  r = run_command(base +
                  " --set train.steps=3 --set checkpoint.every=3 --set checkpoint.keep=1 "
                  "--set checkpoint.resume=false --set checkpoint.overwrite=true");
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(latest(ckpt) == "step-00000003");
  for (const char* s : {"/step-00000002", "/step-00000003", "/step-00000004"})
    CHECK(fs::exists(ckpt + s + "/index.json"));
  auto run_id = [&](const char* s) {
    return nlohmann::json::parse(slurp(ckpt + s + "/index.json")).value("run_id", "");
  };
  CHECK_FALSE(run_id("/step-00000003").empty());
  CHECK(run_id("/step-00000002") == run_id("/step-00000004"));
  CHECK(run_id("/step-00000002") != run_id("/step-00000003"));
  fs::remove_all(dir);
}

TEST_CASE(
    "SIGTERM saves and exits 0, a rerun resumes bitwise, and SIGINT to one rank stops all, exit "
    "130",
    "[reliability]") {
  const std::string dir = scratch("sigterm"), ckpt = dir + "/ckpt";
  const std::string steps = " --set train.steps=100";
  const std::string base = TRAIN + " --nproc-per-node 2" + CONFIG + TINY + steps;
  // 100 steps of 2 ranks: half a minute on idle cores, more beside other tests (the limit only
  // guards against a hang).
  const int limit_s = 400;
  auto r = run_command(base + " --set log.metrics_jsonl=" + dir + "/full.jsonl", limit_s);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const auto full = metrics(dir + "/full.jsonl");
  REQUIRE(full.size() == 100);

  // Starts `run` in the background, and once 5 steps are logged runs `kill` ($pid: the launcher).
  const std::string cut_metrics = dir + "/cut.jsonl";
  auto signal_after_5_steps = [&](const std::string& run, const std::string& kill) {
    return run_command(run + " & pid=$!; for i in $(seq 600); do [ $(cat " + cut_metrics +
                           " 2>/dev/null | wc -l) -ge 5 ] && break; sleep 0.05; done; " + kill +
                           "; wait $pid; rc=$?; echo \"exit $rc\"; exit $rc",
                       limit_s);
  };
  // The same run, SIGTERM to the launcher once a few steps are logged.
  const std::string cmd =
      base + " --set log.metrics_jsonl=" + cut_metrics + " --set checkpoint.dir=" + ckpt;
  r = signal_after_5_steps(cmd, "kill -TERM $pid");
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out + r.err, Contains("SIGTERM: stopped after step ") &&
                                Contains("rerun the same command to resume"));
  const std::string stopped = latest(ckpt);
  REQUIRE_FALSE(stopped.empty());
  const int64_t cut = std::stoll(stopped.substr(5));
  CHECK(cut >= 5);
  CHECK(cut < 100);
  r = run_command(cmd, limit_s);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out + r.err, Contains("after step " + std::to_string(cut)));
  const auto resumed = metrics(cut_metrics);
  REQUIRE(resumed.size() == 100);
  for (size_t i = 0; i < full.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(resumed[i] == full[i]);  // bitwise: loss and norm as doubles
  }

  // SIGINT to rank 1 only: every rank stops after the same step and saves; exit 130.
  fs::remove_all(ckpt);
  fs::remove(cut_metrics);
  r = signal_after_5_steps(cmd, "kill -INT $(pgrep -P $pid | tail -1)");
  INFO(r.out << r.err);
  CHECK(r.code == 130);
  CHECK_THAT(r.out + r.err, Contains("SIGINT: stopped after step "));
  CHECK_THAT(r.err, !Contains("failed with"));  // a stop, not a failure
  CHECK_FALSE(latest(ckpt).empty());
  fs::remove_all(dir);
}

TEST_CASE("stale unfinished saves are removed at start", "[reliability]") {
  const std::string dir = scratch("stale"), ckpt = dir + "/ckpt";
  const std::string base = TRAIN + CONFIG + TINY + " --set checkpoint.dir=" + ckpt;
  REQUIRE(run_command(base + " --set train.steps=2").code == 0);
  // A crash mid-save long ago.
  fs::create_directories(ckpt + "/step-00000001.tmp");
  std::ofstream(ckpt + "/step-00000001.tmp/rank-00000.safetensors") << "partial";
  REQUIRE(run_command("touch -d 2020-01-01 " + ckpt + "/step-00000001.tmp").code == 0);
  auto r = run_command(base + " --set train.steps=3");
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out + r.err, Contains("checkpoint: removed " + ckpt +
                                     "/step-00000001.tmp, an unfinished save older than the "
                                     "newest checkpoint"));
  CHECK_FALSE(fs::exists(ckpt + "/step-00000001.tmp"));
  fs::remove_all(dir);
}

TEST_CASE("messages: a directory as --config, a plan typo, who launched, a corrupt rank file",
          "[reliability]") {
  const std::string dir = scratch("messages");
  auto r = run_command(TRAIN + " --config " + dir);
  CHECK(r.code == 2);  // an input error: exit 2, which launchers never restart
  CHECK_THAT(r.err, Contains("config: '" + dir + "' is a directory; pass a JSON file to --config"));

  // A typo in a plan pattern would leave every attention weight replicated.
  const std::string plan = dir + "/typo.json";
  std::ofstream(plan)
      << R"J({"mesh": ["tp"], "params": {"layers.*.atention.wq.weight": ["Shard(0)"], "*": ["Replicate"]}})J";
  r = run_command(
      TRAIN + " --nproc-per-node 2 --set parallel.mesh={\\\"tp\\\":2} --set parallel.plan=" + plan +
      CONFIG + TINY + " --set train.steps=2");
  INFO(r.out << r.err);
  CHECK(r.code == 2);
  CHECK_THAT(
      r.err,
      Contains(
          "params['layers.*.atention.wq.weight'] matches no parameter of the model; did you mean "
          "'layers.*.attention.wq.weight'?"));
  // Found before any rendezvous (train/validate.h): no rank formed the mesh.
  CHECK_THAT(r.out, !Contains("DeviceMesh("));

  // A checkpoint whose rank-1 file is corrupt: no rank reports a resume that another could not do.
  const std::string ckpt = dir + "/ckpt";
  r = run_command(TRAIN + TP2 + CONFIG + TINY +
                  " --set train.steps=2 --set checkpoint.dir=" + ckpt);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("(launched by vescale-run, device cpu, "));  // who launched
  const std::string file = ckpt + "/step-00000002/rank-00001.safetensors";
  REQUIRE(fs::exists(file));
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 8));
    f << "CORRUPT!";
  }
  r = run_command(TRAIN + TP2 + CONFIG + TINY +
                  " --set train.steps=4 --set checkpoint.dir=" + ckpt);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.out + r.err, !Contains("resumed from"));
  CHECK_THAT(r.err,
             Contains("[rank 1] vescale-train: checkpoint") && Contains("rank-00001.safetensors"));
  CHECK_THAT(r.err, Contains("[rank 0] vescale-train: rank 1 failed: checkpoint"));
  fs::remove_all(dir);
}

TEST_CASE("a hung pipeline stage stops every rank within the timeout, naming the stage's rank",
          "[reliability]") {
  const std::string dir = scratch("pp_hang");
  // Rank 1 (the last stage) is frozen with SIGSTOP after step 2: rank 0 waits for its gradient.
  auto r = run_and_freeze_last_rank(
      " --set parallel.mesh={\\\"pp\\\":2} --set parallel.plan=" + PLANS + "llama_pp.json",
      dir + "/log");
  const std::string log = slurp(dir + "/log");
  INFO(r.out << r.err << log);
  CHECK_THAT(r.out, Contains("exit 1"));
  CHECK(r.seconds < 60);
  // Rank 0's one line is a timeout naming rank 1, in whichever wait of the step rank 1 was stopped
  // before: mostly the schedule's receive of stage 0's gradient; on a loaded machine also the
  // loss broadcast, the gradient norm's all-reduce, or the stop agreement (CI once saw one).
  std::smatch line;
  REQUIRE(
      std::regex_search(log, line, std::regex("\\[rank 0\\] vescale-train: step [0-9]+: [^\\n]*")));
  const std::string error = line.str();
  CHECK_THAT(error, Contains("did not finish within 5000 ms") && Contains("rank 1 did not answer"));
  // Inside the schedule (the loss broadcast included) the stage's rank is named as the pipeline's.
  if (error.find("running the pipeline schedule") != std::string::npos)
    CHECK_THAT(error, Contains("pipeline: rank 0 waited in vain for ") &&
                          Contains("pipeline rank 1 (world rank 1)"));
  fs::remove_all(dir);
}

TEST_CASE(
    "a collapsed model never becomes latest, and resuming a dead checkpoint names the one before",
    "[reliability]") {
  const std::string dir = scratch("collapse"), ckpt = dir + "/ckpt";
  const std::string base = TRAIN + CONFIG + TINY + " --set checkpoint.dir=" + ckpt;
  // The first week's case: lr 1e6 blows the weights up in step 1 (they reach 1e8 from 0.02), and
  // step 2 runs on a model with uniform outputs and a zero gradient. The guard sees the update
  // explode at step 2, before any checkpoint is committed.
  auto r = run_command(base + " --set train.steps=30 --set checkpoint.every=2 --set train.lr=1e6");
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK(r.seconds < 60);
  CHECK_THAT(r.err, Contains("step 2: the parameters' norm grew from ") &&
                        Contains("in the last update: it exploded") &&
                        Contains("No checkpoint has been committed yet."));
  CHECK_FALSE(fs::exists(ckpt + "/latest"));
  check_no_stack(r);
  // A dead checkpoint made with the guard off (max_loss_spike=0: only NaN/inf stop): 2 sane
  // steps, then a third at lr 1e6, committed as latest at once (the last step).
  fs::remove_all(ckpt);
  const std::string every = " --set checkpoint.every=1";
  REQUIRE(run_command(base + every + " --set train.steps=2").code == 0);
  r = run_command(base + every +
                  " --set train.steps=3 --set train.lr=1e6 --set train.max_loss_spike=0");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  REQUIRE(latest(ckpt) == "step-00000003");
  // Resumed with a sane lr, the dead model fails its first step, and the message says the good
  // checkpoint is the one before the resumed one, and how to go back to it.
  r = run_command(base + every + " --set train.steps=8");
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Contains("step 4: ") &&
                        Contains("This run resumed from " + ckpt +
                                 "/step-00000003, so that checkpoint holds "
                                 "the broken model; the last good one is the "
                                 "one before it, step-00000002") &&
                        Contains("(echo step-00000002 > " + ckpt + "/latest)"));
  CHECK(latest(ckpt) == "step-00000003");  // nothing of the failed run was committed
  // Following the advice trains on from step 2.
  std::ofstream(ckpt + "/latest") << "step-00000002\n";
  r = run_command(base + every + " --set train.steps=5");
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Contains("done: 3 steps (3-5, resumed after step 2)"));
  fs::remove_all(dir);
}

TEST_CASE(
    "validation ids are checked before step 1, and the final checkpoint precedes the last "
    "evaluation",
    "[reliability]") {
  const std::string dir = scratch("val_ids"), ckpt = dir + "/ckpt";
  // A validation file with an id past llama_tiny's 256.
  std::vector<int64_t> tokens(4000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i % 200);
  tokens[1500] = 700;
  vescale::tokenizer::write_token_file(dir + "/val.bin", tokens);
  const std::string data =
      " --set data.train=builtin:corpus_train.bin --set data.val=" + dir + "/val.bin";
  auto r = run_command(TRAIN + CONFIG + TINY + data +
                       " --set train.steps=50 --set checkpoint.dir=" + ckpt +
                       " --set train.eval_steps=100");
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK(r.seconds < 30);
  CHECK_THAT(r.err, Contains("data.val: '" + dir +
                             "/val.bin' holds token id 700 (token 1500 of "
                             "the file), outside model.vocab_size = 256"));
  CHECK_THAT(r.out + r.err, !Contains("step 1/50"));
  // Ids the evaluation never reads (past eval_steps' batches) do not stop the run.
  r = run_command(TRAIN + CONFIG + TINY + data + " --set train.steps=2 --set train.eval_steps=1");
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  // The last step: its checkpoint is committed before the evaluation runs (an evaluation that
  // failed could then lose no trained step).
  r = run_command(TRAIN + CONFIG + TINY + " --set train.steps=3 --set checkpoint.dir=" + ckpt);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const size_t saved = r.err.find("checkpoint " + ckpt + "/step-00000003: saved");
  const size_t evaluated = r.err.find("step 3/3 |");
  REQUIRE(saved != std::string::npos);
  REQUIRE(evaluated != std::string::npos);
  CHECK(saved < evaluated);
  CHECK_THAT(r.err.substr(evaluated), Contains("val loss"));
  fs::remove_all(dir);
}

TEST_CASE("the rendezvous waits for missing ranks its own timeout, and says so", "[reliability]") {
  // Rank 0 of 2 alone: with the collective timeout at its default (10 minutes), the
  // rendezvous's own limit of 2 s ends the wait, named in the message.
  const std::string p = std::to_string(vescale::dist::find_free_port());
  auto r = run_command(
      "VESCALE_RENDEZVOUS_TIMEOUT_S=2 WORLD_SIZE=2 RANK=0 MASTER_ADDR=127.0.0.1 "
      "MASTER_PORT=" +
          p + " " + TRAIN + CONFIG + TINY,
      60);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK(r.seconds < 30);
  CHECK_THAT(r.err, Contains("rendezvous: not all 2 ranks joined rank 0's store at 127.0.0.1:" + p +
                             " within 2000 ms"));
  r = run_command(
      "VESCALE_RENDEZVOUS_TIMEOUT_S=soon WORLD_SIZE=2 RANK=0 MASTER_ADDR=127.0.0.1 "
      "MASTER_PORT=" +
          p + " " + TRAIN + CONFIG + TINY,
      60);
  CHECK(r.code == 1);
  CHECK_THAT(r.err,
             Contains("VESCALE_RENDEZVOUS_TIMEOUT_S='soon' is not a positive number of seconds"));
}

TEST_CASE(
    "a collective timeout on the dp and tp paths is one line naming step, phase, group and rank",
    "[reliability]") {
  const std::string dir = scratch("timeout");
  const std::string tp =
      " --set parallel.mesh={\\\"tp\\\":2} --set parallel.plan=" + PLANS + "llama_tp.json";
  for (const std::string& layout : {std::string(" --set parallel.mesh={\\\"dp\\\":2}"), tp}) {
    INFO(layout);
    // Rank 1 is frozen with SIGSTOP after step 2: rank 0 waits in a collective of the step.
    auto r = run_and_freeze_last_rank(layout, dir + "/log");
    const std::string log = slurp(dir + "/log");
    INFO(r.out << r.err << log);
    CHECK_THAT(r.out, Contains("exit 1"));
    CHECK(r.seconds < 60);
    CHECK_THAT(log, Contains("vescale-train: step ") && Contains(" on group '") &&
                        Contains("did not finish within 5000 ms: rank 1 did not answer"));
    // One line: the step and the phase lead it, and no libtorch stack follows.
    std::smatch m;
    CHECK(std::regex_search(
        log, m, std::regex("vescale-train: step [0-9]+: [a-z ]+: [a-z_]+ #[0-9]+ on group")));
    CHECK_THAT(log, !Contains("Exception raised from") && !Contains("frame #"));
  }
  fs::remove_all(dir);
}

TEST_CASE(
    "a model that cannot fit is refused before it is built, with the dry-run figures and the fixes",
    "[reliability]") {
  // LLaMA-3 8B on one rank, as the first week tried it: no plan, one process.
  auto r = run_command(TRAIN + " --config " VESCALE_SOURCE_DIR "/configs/llama3_8b.json" +
                           " --set train.steps=1 --set parallel.mesh={\\\"dp\\\":1}"
                           " --set parallel.plan= --set log.metrics_jsonl=",
                       60);
  INFO(r.out << r.err);
  CHECK(r.code == 2);  // InputError: no restart can make it fit
  CHECK(r.seconds < 30);
  CHECK_THAT(r.err, Contains("model.llama does not fit: each rank needs about ") &&
                        Contains("the --dry-run estimate) but has ") &&
                        Contains("more ranks (--nproc-per-node") &&
                        Contains("train.allow_oversubscribe=true"));
  check_no_stack(r);
}

TEST_CASE(
    "two runs on one checkpoint.dir: the second is refused naming the first, a dead one's lock is "
    "taken over",
    "[reliability]") {
  const std::string dir = scratch("lock"), ckpt = dir + "/ckpt";
  const std::string run = TRAIN + " --nproc-per-node 2" + CONFIG + TINY +
                          " --set checkpoint.every=2 --set checkpoint.dir=" + ckpt;
  // The first run trains on; the second starts beside it, then the first is killed (-9: its lock
  // file stays, naming a dead process) and a third takes the lock over.
  auto r = run_command(
      run + " --set train.steps=1000000 > " + dir + "/first.log 2>&1 & pid=$!; " +
          "for i in $(seq 600); do [ -f " + ckpt + "/latest ] && break; sleep 0.1; done; " + run +
          " --set train.steps=3 > " + dir + "/second.log 2>&1; echo \"second $?\"; " +
          "kill -9 $pid; wait $pid; sleep 1; " + run + " --set train.steps=$(( 10#$(tr -dc 0-9 < " +
          ckpt + "/latest) + 2 ))" + " > " + dir + "/third.log 2>&1; echo \"third $?\"",
      240);
  const std::string second = slurp(dir + "/second.log"), third = slurp(dir + "/third.log");
  INFO(r.out << r.err << second << third);
  CHECK_THAT(r.out, Contains("second 1"));
  CHECK(r.seconds < 200);
  CHECK_THAT(second, Contains("checkpoint.dir '" + ckpt +
                              "' is in use by another run (it holds "
                              "the lock: host=") &&
                         Contains(" pid=") && Contains(" started=") &&
                         Contains("delete " + ckpt + "/.lock"));
  CHECK_THAT(second, !Contains("step 1/3"));
  CHECK_THAT(r.out, Contains("third 0"));
  CHECK_THAT(third, Contains("took over the lock of a process that is gone (host="));
  CHECK_FALSE(fs::exists(ckpt + "/.lock"));  // released at the end
  fs::remove_all(dir);
}

TEST_CASE(
    "a bad --timeline path fails before step 1, a failed save leaves no .tmp, and a resume with "
    "another seq_len or global batch is refused",
    "[reliability]") {
  const std::string dir = scratch("early"), ckpt = dir + "/ckpt";
  auto r =
      run_command(TRAIN + CONFIG + TINY + " --set train.steps=5 --timeline /proc/vescale_x/t.json");
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK(r.seconds < 30);
  CHECK_THAT(r.err, Contains("log.timeline.out's folder '/proc/vescale_x' cannot be created"));
  CHECK_THAT(r.out + r.err, !Contains("step 1/5"));
  // Files over 64 KiB fail (as on a full disk): the rank file of the step-2 save cannot be written.
  // (SIGXFSZ ignored: the write returns EFBIG instead of killing the process.)
  r = run_command("trap \"\" XFSZ; ulimit -f 64; " + TRAIN + CONFIG + TINY +
                  " --set train.steps=4 --set checkpoint.every=2 --set checkpoint.async=false "
                  "--set checkpoint.dir=" +
                  ckpt);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err,
             Contains("checkpoint: writing " + ckpt + "/step-00000002 failed on rank(s) 0") &&
                 Contains("the unfinished save was removed"));
  CHECK_FALSE(fs::exists(ckpt + "/step-00000002.tmp"));
  CHECK_FALSE(fs::exists(ckpt + "/step-00000002"));
  // A checkpoint of seq_len 32 and 2 sequences per step.
  fs::remove_all(ckpt);
  REQUIRE(run_command(TRAIN + CONFIG + TINY + " --set train.steps=2 --set checkpoint.dir=" + ckpt)
              .code == 0);
  r = run_command(TRAIN + CONFIG + TINY +
                  " --set train.steps=4 --set train.seq_len=64 --set checkpoint.dir=" + ckpt);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Contains("was trained with train.seq_len=32, this run has 64; resume with "
                             "--set train.seq_len=32"));
  r = run_command(TRAIN + CONFIG + TINY +
                  " --set train.steps=4 --set train.batch_size=4 --set checkpoint.dir=" + ckpt);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Contains("took 2 sequences per step (its global batch), this run takes 4 "
                             "(train.batch_size 4 x 1 micro-batches x 1 data ranks)"));
  // The same global batch at another layout resumes (2 data ranks of 1 sequence).
  r = run_command(TRAIN + " --nproc-per-node 2" + CONFIG + TINY +
                  " --set train.steps=3 --set train.batch_size=1 --set checkpoint.dir=" + ckpt);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out + r.err, Contains("after step 2"));
  fs::remove_all(dir);
}
