// One training step of vescale's trainer (single rank, fp32, CPU, 1 thread): GPT forward,
// cross-entropy, backward, global-norm clipping, AdamW, from the built-in corpus. Prints one
// JSON line per measured step for bench/train_step.sh, which runs the PyTorch Python loop
// (bench/train_step.py) on the same dims alternately and writes bench/results/train_step.md.
//   train_step CONFIG STEPS [--set k=v ...]
#include <ATen/Parallel.h>

#include <cstdio>
#include <string>
#include <vector>

#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/train/trainer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: train_step CONFIG STEPS [--set k=v ...]\n");
    return 2;
  }
  try {
    at::set_num_threads(1);
    vescale::log::init(0, "warn");
    std::vector<std::string> sets{"log.metrics_jsonl=\"\"", "train.grad_accum=1", "train.dtype=fp32"};
    for (int i = 3; i + 1 < argc; i += 2) sets.emplace_back(argv[i + 1]);
    const int steps = std::stoi(argv[2]);
    sets.push_back("train.steps=" + std::to_string(steps));
    auto cfg = vescale::train::Config::from_file(argv[1], sets);
    vescale::train::Trainer trainer(cfg);
    for (int s = 0; s < steps; ++s) {
      auto m = trainer.step(s);
      std::printf("{\"impl\": \"vescale\", \"step\": %d, \"ms\": %.3f, \"loss\": %.4f}\n", s, m.step_ms, m.loss);
      std::fflush(stdout);
    }
  } catch (const vescale::Error& e) {
    std::fprintf(stderr, "train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
