// One training step of vescale's trainer (single rank, fp32, CPU, 1 thread): GPT forward,
// cross-entropy, backward, global-norm clipping, AdamW, from the built-in corpus. Prints one
// JSON line per measured step for bench/train_step.sh, which runs the PyTorch Python loop
// (bench/train_step.py) on the same dims alternately and writes bench/results/train_step.md.
// The trainer gets a 1-device mesh, as vescale-train builds one.
//   train_step CONFIG STEPS [--set k=v ...]
// VESCALE_PROFILE=1: record the steps after the first two with libtorch's autograd profiler
// and print, to stderr, each op's calls and self time per step (the Python loop's
// VESCALE_PROFILE=1 prints torch.profiler's table for the same steps). VESCALE_PROFILE=shapes
// splits each op by its input shapes.
#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"

#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/world.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/train/trainer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: train_step CONFIG STEPS [--set k=v ...]\n");
    return 2;
  }
  try {
    at::set_num_threads(1);
    vescale::log::init(0, "warn");
    std::vector<std::string> sets{"log.metrics_jsonl=\"\"", "train.grad_accum=1",
                                  "train.dtype=fp32"};
    for (int i = 3; i + 1 < argc; i += 2) sets.emplace_back(argv[i + 1]);
    const int steps = std::stoi(argv[2]);
    sets.push_back("train.steps=" + std::to_string(steps));
    auto cfg = vescale::train::Config::from_file(argv[1], sets);
    vescale::dist::init();
    auto mesh = vescale::mesh::DeviceMesh::init({{"dp", 1}});
    const char* profile_env = std::getenv("VESCALE_PROFILE");
    const bool profile = profile_env != nullptr,
               by_shape = profile && std::string(profile_env) == "shapes";
    {
      vescale::train::Trainer trainer(cfg, mesh);
      std::unique_ptr<bench::OpProfile> recording;
      for (int s = 0; s < steps; ++s) {
        if (profile && s == 2)
          recording = std::make_unique<bench::OpProfile>("", steps - 2, by_shape);
        const double cpu0 = bench::thread_cpu_ms();
        auto m = trainer.step(s);
        const double cpu_ms = bench::thread_cpu_ms() - cpu0;
        std::printf(
            "{\"impl\": \"vescale\", \"step\": %d, \"ms\": %.3f, \"cpu_ms\": %.3f, \"loss\": "
            "%.4f}\n",
            s, m.step_ms, cpu_ms, m.loss);
        std::fflush(stdout);
      }
    }
    vescale::dist::shutdown();
  } catch (const vescale::Error& e) {
    std::fprintf(stderr, "train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
