// The checkpoint manager on its own, one process: what it refuses and cleans before a run,
// when a save becomes latest, and that a resume puts back every piece of the run's state.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/utils.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "vescale/checkpoint/distributed_checkpoint.h"
#include "vescale/optim/adamw.h"
#include "vescale/random/random.h"
#include "vescale/train/checkpoint_manager.h"
#include "vescale/train/model_factory.h"
#include "vescale/train/token_data.h"
#include "vescale/train/trainer.h"

using namespace vescale::train;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

Config tiny(const std::string& dir, std::vector<std::string> o = {}) {
  o.insert(o.end(), {"model.n_layer=1", "model.n_embd=32", "model.n_head=2", "train.batch_size=2",
                     "train.seq_len=16", "log.metrics_jsonl=\"\"", "checkpoint.dir=\"" + dir + "\"",
                     "checkpoint.async=false"});
  return Config::from_file(VESCALE_SOURCE_DIR "/configs/nanogpt_tiny.json", o);
}

std::string fresh_dir(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("vescale_ckmgr_" + name);
  fs::remove_all(dir);
  return dir.string();
}

// What a run lends the manager: a model, its AdamW, the training data.
struct RunState {
  Model model;
  std::unique_ptr<vescale::optim::AdamW> optimizer;
  std::unique_ptr<DataLoader> loader;

  RunState(const Config& c, uint64_t seed) {
    torch::manual_seed(seed);
    model = build_model(c.model);
    vescale::optim::NamedParams named;
    for (const auto& item : model.module->named_parameters())
      named.emplace_back(item.key(), item.value());
    optimizer = std::make_unique<vescale::optim::AdamW>(vescale::optim::decay_groups(named, 0.1),
                                                        vescale::optim::AdamWOptions{.lr = 1e-3});
    auto data = std::make_shared<TokenDataset>(data_files(c.data, "train"));
    loader = std::make_unique<DataLoader>(data, c.train.batch_size, c.train.seq_len, 0, 1, 7);
  }
  CheckpointParts parts() { return {&model, optimizer.get(), nullptr, loader.get(), "cpu", false}; }
  // One training step, so the optimizer has state and the loader has moved.
  void train_step() {
    auto b = loader->next();
    auto logits = model.forward(b.inputs);
    auto loss = at::cross_entropy_loss(logits.flatten(0, 1), b.targets.flatten());
    loss.backward();
    optimizer->step();
    optimizer->zero_grad();
  }
};

const StepBatch kBatch{.batch_size = 2, .microbatches = 1, .data_ranks = 1, .seq_len = 16};

}  // namespace

TEST_CASE("a staged save becomes latest only when committed, and a resume puts back weights, "
          "optimizer, both generators and the data position",
          "[trainer][checkpoint]") {
  const auto dir = fresh_dir("resume");
  const Config c = tiny(dir);
  RunState first(c, 1);
  CheckpointManager saving(c, 0);
  saving.start(first.parts(), kBatch);
  CHECK_FALSE(saving.resumed());
  CHECK(saving.run_id().size() == 19);  // "<10-digit seconds>-<8 hex>"
  first.train_step();
  first.train_step();
  vescale::random::manual_seed(1234);
  saving.stage(2);
  CHECK(saving.pending());
  CHECK_FALSE(vescale::checkpoint::latest(dir).has_value());  // staged is not visible
  saving.commit();
  CHECK_FALSE(saving.pending());
  CHECK(vescale::checkpoint::latest(dir) == dir + "/step-00000002");
  // What the run draws next from each generator, and where its data goes on.
  const auto philox = vescale::random::get_state();
  const at::Tensor next_torch = at::rand({4});
  const auto pos = first.loader->position();
  const auto state = first.optimizer->state_tensors();

  RunState second(c, 99);  // other weights, no optimizer state, data at the start
  at::rand({7});           // the generator elsewhere
  vescale::random::manual_seed(5);
  CheckpointManager resuming(c, 0);
  resuming.start(second.parts(), kBatch);
  CHECK(resuming.resumed());
  CHECK(resuming.resumed_step() == 2);
  CHECK(resuming.run_id() == saving.run_id());
  auto a = first.model.module->named_parameters(), b = second.model.module->named_parameters();
  REQUIRE(a.size() == b.size());
  for (const auto& item : a) CHECK(at::equal(item.value(), b[item.key()]));
  const auto loaded = second.optimizer->state_tensors();
  REQUIRE(loaded.size() == state.size());
  for (const auto& [name, t] : state) CHECK(at::equal(t, loaded.at(name)));
  CHECK(vescale::random::get_state().seed == philox.seed);
  CHECK(vescale::random::get_state().offset == philox.offset);
  CHECK(at::equal(at::rand({4}), next_torch));
  CHECK(second.loader->position().epoch == pos.epoch);
  CHECK(second.loader->position().step == pos.step);
  CHECK(pos.step == 2);
}

TEST_CASE("a used checkpoint folder is refused without resume or overwrite, and stale saves go",
          "[trainer][checkpoint]") {
  const auto dir = fresh_dir("used");
  {
    const Config c = tiny(dir);
    RunState run(c, 1);
    CheckpointManager m(c, 0);
    m.start(run.parts(), kBatch);
    m.stage(1);
    m.commit();
  }
  // An unfinished save from a crash, older than the committed one.
  fs::create_directories(dir + "/step-00000000.tmp");
  fs::last_write_time(dir + "/step-00000000.tmp",
                      fs::last_write_time(dir + "/step-00000001") - std::chrono::hours(1));
  CHECK_THROWS_WITH(CheckpointManager(tiny(dir, {"checkpoint.resume=false"}), 0),
                    Contains("already holds checkpoints (latest: " + dir + "/step-00000001)") &&
                        Contains("checkpoint.overwrite=true"));
  CHECK(fs::exists(dir + "/step-00000000.tmp"));  // a refused run touches nothing
  CheckpointManager over(tiny(dir, {"checkpoint.resume=false", "checkpoint.overwrite=true"}), 0);
  CHECK_FALSE(fs::exists(dir + "/step-00000000.tmp"));
  // A file where the folder should be.
  const auto file = fresh_dir("file");
  std::ofstream(file) << "x";
  CHECK_THROWS_WITH(CheckpointManager(tiny(file), 0),
                    Contains("checkpoint.dir '" + file + "' cannot be created"));
  fs::remove(file);
}

TEST_CASE("checkpoints are due every N steps and after the last, and a resume with another global "
          "batch is refused naming both",
          "[trainer][checkpoint]") {
  const auto dir = fresh_dir("due");
  const Config c = tiny(dir, {"checkpoint.every=3"});
  CheckpointManager m(c, 0);
  CHECK_FALSE(m.due(1, false));
  CHECK(m.due(3, false));
  CHECK_FALSE(m.due(4, false));
  CHECK(m.due(6, false));
  CHECK(m.due(5, true));
  RunState run(c, 1);
  m.start(run.parts(), kBatch);
  m.stage(3);
  m.commit();
  RunState other(c, 1);
  CheckpointManager four(c, 0);
  StepBatch accum = kBatch;
  accum.microbatches = 2;
  CHECK_THROWS_WITH(four.start(other.parts(), accum),
                    Contains("took 2 sequences per step") && Contains("this run takes 4") &&
                        Contains("train.batch_size 2 x 2 micro-batches x 1 data ranks"));
}

TEST_CASE("the last good checkpoint is latest, or the one before a resumed checkpoint",
          "[trainer][checkpoint]") {
  const auto dir = fresh_dir("last_good");
  const Config c = tiny(dir);
  {
    RunState run(c, 1);
    CheckpointManager m(c, 0);
    m.start(run.parts(), kBatch);
    CHECK(m.last_good(1) == " No checkpoint has been committed yet.");
    m.stage(1);
    m.commit();
    m.stage(2);
    m.commit();
    CHECK(m.last_good(3) == " The last good checkpoint is " + dir + "/step-00000002 (latest).");
  }
  RunState run(c, 1);
  CheckpointManager resumed(c, 0);
  resumed.start(run.parts(), kBatch);
  // The first step after the resume ran the resumed weights: they are the broken ones.
  CHECK_THAT(resumed.last_good(3),
             Contains("This run resumed from " + dir + "/step-00000002") &&
                 Contains("echo step-00000001 > " + dir + "/latest"));
  CHECK(resumed.last_good(4) == " The last good checkpoint is " + dir + "/step-00000002 (latest).");
}
