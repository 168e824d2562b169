// Pipeline schedules measured against their simulation: at PP = the world size (4 under
// bench/pipeline.sh), each schedule (gpipe, 1f1b, interleaved_1f1b with 2 chunks, zb_h1) trains
// the same small LLaMA through vescale's Trainer under configs/plans/llama_pp.json with the
// schedule, micro-batches and chunks patched in, and (--split blocks, the default) stage cuts
// that give every stage the same number of blocks, so that stage imbalance, which the
// simulator's one-cost-per-kind model leaves out, stays out of the measured bubble too. After the warm-up steps every rank keeps its
// runner's RunnerStats per step; rank 0 gathers them and prints, per schedule (over --rounds
// rounds of every schedule in turn, each a fresh Trainer with its own warm-up):
//   - the pipeline step (the runner's train_step, the slowest rank's step_s; median over steps)
//     and the trainer's whole step (optimizer and grad-norm collectives included);
//   - the measured bubble, 1 - sum over ranks of busy_s / (ranks * step_s) (per step, median);
//   - the simulator's bubble (schedule.h's simulate) for the same schedule, with ActionCosts
//     from the measured mean seconds per action of that run (F: forward_s / forwards; I and W of
//     zb_h1: backward_s / backwards and weight_s / weights; a full B of the other schedules is
//     split into I and W by zb_h1's measured I / (I + W) -- the simulator charges a B as I + W,
//     so the split does not move their figures), p2p 0;
//   - the textbook bubble (p-1)/(m+p-1), and each schedule's step over 1f1b's (paired: per
//     round, then the median over rounds).
// Each rank's process CPU time per trainer step (all its threads), summed over the ranks: the
// step's CPU work, and over (min(cores, ranks) x the step's wall time) the cores' share this
// run got -- on a machine with fewer cores than ranks the step cannot beat CPU work / cores.
// Output: one JSON line per schedule ({"schedule": ...}) and a markdown table, on rank 0.
//   vescale-run --nproc-per-node 4 -- pipeline_bench [--steps N] [--warmup N] [--rounds R]
//       [--microbatches M] [--chunks V] [--dim D] [--layers L] [--seq S] [--batch B]
//       [--split blocks|even] [--schedules gpipe,1f1b,...]
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"

#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/world.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/parallel/pipeline/schedule.h"
#include "vescale/train/forward_backward.h"
#include "vescale/train/trainer.h"

namespace pp = vescale::parallel::pipeline;

namespace {

struct Options {
  int steps = 4, warmup = 2, rounds = 3, microbatches = 8, chunks = 2;
  int dim = 192, layers = 8, seq = 64, batch = 2;
  // "blocks": every stage the same number of blocks (the embedding joins the first stage, the
  // head the last), when the stages divide the layers; "even": the plan's own split, where the
  // embedding and the head count as a layer each.
  std::string split = "blocks";
  std::vector<pp::ScheduleKind> schedules = vescale::plan::schedule_kinds();
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    VESCALE_CHECK(i + 1 < argc, "pipeline_bench: ", a, " needs a value");
    const std::string v = argv[++i];
    if (a == "--steps") o.steps = std::stoi(v);
    else if (a == "--warmup") o.warmup = std::stoi(v);
    else if (a == "--rounds") o.rounds = std::stoi(v);
    else if (a == "--microbatches") o.microbatches = std::stoi(v);
    else if (a == "--chunks") o.chunks = std::stoi(v);
    else if (a == "--dim") o.dim = std::stoi(v);
    else if (a == "--layers") o.layers = std::stoi(v);
    else if (a == "--seq") o.seq = std::stoi(v);
    else if (a == "--batch") o.batch = std::stoi(v);
    else if (a == "--split") o.split = v;
    else if (a == "--schedules") {
      o.schedules.clear();
      std::stringstream ss(v);
      for (std::string s; std::getline(ss, s, ',');)
        o.schedules.push_back(vescale::plan::parse_schedule_kind(s));
    } else {
      VESCALE_CHECK(false, "pipeline_bench: unknown option ", a,
                    " (--steps --warmup --rounds --microbatches --chunks --dim --layers --seq --batch "
                    "--split --schedules)");
    }
  }
  VESCALE_CHECK(o.steps >= 1 && o.warmup >= 0 && o.rounds >= 1,
                "pipeline_bench: --steps >= 1, --warmup >= 0, --rounds >= 1");
  return o;
}

// One rank's measured step: the runner's counters and the trainer's whole step.
struct Sample {
  pp::RunnerStats stats;
  double trainer_s = 0, cpu_s = 0;
};

// The shipped plan with this schedule, written where this rank reads it.
std::string plan_file(const Options& o, pp::ScheduleKind schedule, int ranks, int chunks) {
  nlohmann::ordered_json j;
  std::ifstream(VESCALE_SOURCE_DIR "/configs/plans/llama_pp.json") >> j;
  j["pipeline"]["schedule"] = to_string(schedule);
  j["pipeline"]["microbatches"] = o.microbatches;
  j["pipeline"]["chunks"] = chunks;
  const int stages = ranks * chunks;
  if (o.split == "blocks" && o.layers % stages == 0) {
    std::vector<std::string> starts;
    for (int s = 0; s < stages; ++s)
      starts.push_back("layers." + std::to_string(s * (o.layers / stages)));
    j["pipeline"]["stages"] = starts;
  } else {
    VESCALE_CHECK(o.split == "blocks" || o.split == "even", "pipeline_bench: --split ", o.split,
                  ": blocks or even");
  }
  const std::string path = "/tmp/vescale_pipeline_bench." + std::to_string(::getppid()) + "." +
                           to_string(schedule) + "." + std::to_string(vescale::dist::rank()) +
                           ".json";
  std::ofstream(path) << j.dump();
  return path;
}

vescale::train::Config config(const Options& o, pp::ScheduleKind schedule, int ranks) {
  const int m = o.microbatches;
  std::vector<std::string> sets{
      "log.metrics_jsonl=\"\"", "train.dtype=fp32", "train.eval_steps=1", "train.warmup_steps=2",
      "train.steps=" + std::to_string(o.warmup + o.steps),
      "train.batch_size=" + std::to_string(o.batch), "train.seq_len=" + std::to_string(o.seq),
      "train.grad_accum=" + std::to_string(m), "model.dim=" + std::to_string(o.dim),
      "model.n_layers=" + std::to_string(o.layers), "model.n_heads=4", "model.n_kv_heads=2",
      "model.ffn_dim=" + std::to_string(3 * o.dim), "model.max_seq_len=" + std::to_string(o.seq)};
  auto cfg = vescale::train::Config::from_file(VESCALE_SOURCE_DIR "/configs/llama_tiny.json", sets);
  cfg.parallel.mesh = {{"pp", ranks}};
  cfg.parallel.plan =
      plan_file(o, schedule, ranks, schedule == pp::ScheduleKind::Interleaved1F1B ? o.chunks : 1);
  return cfg;
}

std::string serialize(const std::vector<Sample>& samples) {
  std::ostringstream os;
  os.precision(9);
  for (const auto& s : samples) {
    const auto& r = s.stats;
    os << r.step_s << ' ' << r.forward_s << ' ' << r.backward_s << ' ' << r.weight_s << ' '
       << r.forwards << ' ' << r.backwards << ' ' << r.weights << ' ' << r.peak_live << ' '
       << s.trainer_s << ' ' << s.cpu_s << '\n';
  }
  return os.str();
}

std::vector<Sample> deserialize(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream is(text);
  Sample s;
  auto& r = s.stats;
  while (is >> r.step_s >> r.forward_s >> r.backward_s >> r.weight_s >> r.forwards >>
         r.backwards >> r.weights >> r.peak_live >> s.trainer_s >> s.cpu_s)
    out.push_back(s);
  return out;
}

struct Result {
  std::string schedule;
  pp::Schedule sched;
  double step_ms = 0, trainer_ms = 0, bubble = 0, utilization = 0, cpu_ms = 0;
  std::vector<double> rank_bubble;  // per rank: 1 - busy / pipeline step, median over steps
  double f_ms = 0, b_ms = 0, w_ms = 0;  // mean per action (B: a full backward, or an I)
  double sim_bubble = 0, sim_ms = 0, textbook = 0, i_share = 0.5;
  std::vector<int64_t> peak_live;
  std::vector<double> round_ms;  // per round: the median pipeline step
};

Result summarize(const pp::Schedule& sched,
                 const std::vector<std::vector<Sample>>& by_rank) {
  Result res;
  res.schedule = to_string(sched.kind);
  res.sched = sched;
  const size_t ranks = by_rank.size(), steps = by_rank[0].size();
  std::vector<double> step, trainer, bubble, util, cpu_total;
  std::vector<std::vector<double>> rank_bubble(ranks);
  double f = 0, b = 0, w = 0;
  int64_t nf = 0, nb = 0, nw = 0;
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  for (size_t k = 0; k < steps; ++k) {
    double makespan = 0, busy = 0, tr = 0, cpu = 0;
    for (size_t r = 0; r < ranks; ++r) {
      const auto& s = by_rank[r][k];
      makespan = std::max(makespan, s.stats.step_s);
      tr = std::max(tr, s.trainer_s);
      busy += s.stats.busy_s();
      cpu += s.cpu_s;
      f += s.stats.forward_s, b += s.stats.backward_s, w += s.stats.weight_s;
      nf += s.stats.forwards, nb += s.stats.backwards, nw += s.stats.weights;
    }
    for (size_t r = 0; r < ranks; ++r)
      rank_bubble[r].push_back(1 - by_rank[r][k].stats.busy_s() / makespan);
    step.push_back(makespan);
    trainer.push_back(tr);
    bubble.push_back(1 - busy / (static_cast<double>(ranks) * makespan));
    util.push_back(cpu / (std::min<double>(cores, ranks) * tr));
    cpu_total.push_back(cpu);
  }
  res.step_ms = 1e3 * bench::median(step);
  res.trainer_ms = 1e3 * bench::median(trainer);
  res.bubble = bench::median(bubble);
  res.utilization = bench::median(util);
  res.cpu_ms = 1e3 * bench::median(cpu_total);
  for (auto& v : rank_bubble) res.rank_bubble.push_back(bench::median(v));
  for (size_t r = 0; r < ranks; ++r) res.peak_live.push_back(by_rank[r].back().stats.peak_live);
  res.f_ms = nf ? 1e3 * f / nf : 0;
  res.b_ms = nb ? 1e3 * b / nb : 0;
  res.w_ms = nw ? 1e3 * w / nw : 0;
  res.textbook = pp::textbook_bubble(static_cast<int>(ranks), sched.microbatches);
  return res;
}

// The simulator on the measured per-action costs; `i_share`: I's part of a full backward.
void simulate(Result& r, double i_share) {
  pp::ActionCosts costs;
  costs.forward = r.f_ms;
  if (r.sched.splits_backward()) {
    costs.backward_input = r.b_ms, costs.backward_weight = r.w_ms;
  } else {
    r.i_share = i_share;
    costs.backward_input = r.b_ms * i_share, costs.backward_weight = r.b_ms * (1 - i_share);
  }
  costs.p2p = 0;
  const auto sim = pp::simulate(r.sched, costs);
  r.sim_bubble = sim.bubble_fraction;
  r.sim_ms = sim.makespan;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    at::set_num_threads(1);
    vescale::dist::init({.device = "cpu"});
    const int rank = vescale::dist::rank(), ranks = vescale::dist::world_size();
    vescale::log::init(rank, "warn");
    auto world = vescale::mesh::DeviceMesh::init({{"pp", ranks}});
    // Rounds: every schedule once per round (a fresh Trainer, its own warm-up), the order
    // rotated from round to round, so that the machine's drift falls on every schedule alike and
    // each round gives a paired ratio to 1f1b.
    const size_t n = o.schedules.size();
    std::vector<std::vector<std::vector<Sample>>> samples(n);  // schedule -> rank -> steps
    std::vector<std::vector<double>> round_ms(n);              // schedule -> per round
    std::vector<pp::Schedule> scheds(n);
    for (int round = 0; round < o.rounds; ++round) {
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (k + round) % n;
        const pp::ScheduleKind schedule = o.schedules[i];
        auto cfg = config(o, schedule, ranks);
        std::vector<Sample> mine;
        {
          vescale::train::Trainer trainer(cfg, world);
          std::remove(cfg.parallel.plan.c_str());
          VESCALE_CHECK(trainer.forward_backward().schedule() && trainer.forward_backward().stats(),
                        "pipeline_bench: the trainer runs no pipeline");
          scheds[i] = *trainer.forward_backward().schedule();
          for (int s = 0; s < o.warmup + o.steps; ++s) {
            vescale::dist::barrier();
            const double cpu0 = bench::process_cpu_ms();
            const auto m = trainer.step(s);
            const double cpu_s = (bench::process_cpu_ms() - cpu0) / 1e3;
            if (s >= o.warmup) mine.push_back({*trainer.forward_backward().stats(), m.step_ms / 1e3, cpu_s});
          }
        }
        const auto texts = vescale::dist::all_gather_text(serialize(mine));
        if (rank != 0) continue;
        samples[i].resize(texts.size());
        std::vector<double> makespans(o.steps, 0.0);
        for (size_t r = 0; r < texts.size(); ++r) {
          const auto got = deserialize(texts[r]);
          for (size_t st = 0; st < got.size(); ++st)
            makespans[st] = std::max(makespans[st], got[st].stats.step_s);
          samples[i][r].insert(samples[i][r].end(), got.begin(), got.end());
        }
        round_ms[i].push_back(1e3 * bench::median(makespans));
      }
    }
    std::vector<Result> results;
    if (rank == 0)
      for (size_t i = 0; i < n; ++i) {
        results.push_back(summarize(scheds[i], samples[i]));
        results.back().round_ms = round_ms[i];
      }
    if (rank == 0) {
      // I's share of a full backward, from zb_h1's split run (0.5 without one).
      double i_share = 0.5;
      for (const auto& r : results)
        if (r.sched.splits_backward() && r.b_ms + r.w_ms > 0) i_share = r.b_ms / (r.b_ms + r.w_ms);
      double f1b1_ms = 0, f1b1_trainer = 0;
      const Result* f1b1 = nullptr;
      for (auto& r : results) {
        simulate(r, i_share);
        if (r.schedule == "1f1b") f1b1_ms = r.step_ms, f1b1_trainer = r.trainer_ms, f1b1 = &r;
      }
      // Per round, the schedule's step over 1f1b's in the same round; the median over rounds.
      auto paired = [&](const Result& r) {
        std::vector<double> q;
        for (size_t k = 0; k < r.round_ms.size(); ++k) q.push_back(r.round_ms[k] / f1b1->round_ms[k]);
        return bench::median(q);
      };
      for (const auto& r : results) {
        nlohmann::ordered_json j;
        j["schedule"] = r.schedule;
        j["ranks"] = ranks;
        j["microbatches"] = r.sched.microbatches;
        j["chunks"] = r.sched.chunks();
        j["steps"] = o.steps, j["rounds"] = o.rounds, j["warmup"] = o.warmup;
        j["dim"] = o.dim, j["layers"] = o.layers, j["seq"] = o.seq, j["batch"] = o.batch;
        j["step_ms"] = r.step_ms;
        j["trainer_ms"] = r.trainer_ms;
        j["bubble"] = r.bubble;
        j["rank_bubble"] = r.rank_bubble;
        j["sim_bubble"] = r.sim_bubble;
        j["sim_ms"] = r.sim_ms;
        j["textbook"] = r.textbook;
        j["f_ms"] = r.f_ms, j["b_ms"] = r.b_ms, j["w_ms"] = r.w_ms;
        j["i_share"] = r.sched.splits_backward() ? r.b_ms / (r.b_ms + r.w_ms) : r.i_share;
        j["utilization"] = r.utilization;
        j["cpu_ms"] = r.cpu_ms;
        j["peak_live"] = r.peak_live;
        j["round_ms"] = r.round_ms;
        if (f1b1) {
          j["vs_1f1b"] = paired(r);
          j["vs_1f1b_unpaired"] = r.step_ms / f1b1_ms;
          j["trainer_vs_1f1b"] = r.trainer_ms / f1b1_trainer;
        }
        std::printf("%s\n", j.dump().c_str());
      }
      std::printf(
          "\n| schedule | pipeline step ms | trainer step ms | measured bubble | simulated bubble "
          "| textbook (p-1)/(m+p-1) | step / 1f1b (paired) | F / B (or I) / W ms | CPU ms per step | cores busy |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|\n");
      for (const auto& r : results) {
        const std::string name =
            r.schedule + (r.sched.chunks() > 1 ? " (chunks " + std::to_string(r.sched.chunks()) + ")" : "");
        std::printf("| %s | %.1f | %.1f | %.1f | %.3f | %.3f | %.3f | %s | %.2f / %.2f%s | %.0f | %.0f%% |\n",
                    name.c_str(), r.step_ms, r.trainer_ms, r.sim_ms, r.bubble, r.sim_bubble, r.textbook,
                    f1b1 ? fmt("%.2fx", paired(r)).c_str() : "n/a", r.f_ms,
                    r.b_ms, r.sched.splits_backward() ? fmt(" / %.2f", r.w_ms).c_str() : "",
                    r.cpu_ms, 100 * r.utilization);
      }
      std::fflush(stdout);
    }
    vescale::dist::shutdown();
  } catch (const vescale::Error& e) {
    std::fprintf(stderr, "pipeline_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
