#include "train/trainer_timeline.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <cstdio>
#include <filesystem>

#include "vescale/checkpoint/safetensors.h"
#include "vescale/common/check.h"
#include "vescale/nn/block_pattern.h"
#include "vescale/common/logging.h"
#include "vescale/dist/clock_sync.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/world.h"
#include "vescale/timeline/recorder.h"
#include "vescale/timeline/trace.h"
#include "vescale/train/model_factory.h"

namespace vescale::train {

namespace {

// Marks in the autograd graph: identity functions whose backward opens (on a block's output)
// or closes (on its input) the block's backward span. The graph orders them: block i's input
// mark runs before block i-1's output mark, so the spans nest. The backward passes the gradient
// through untouched (no op on it, DTensor or not).
template <bool kOpens>
struct BackwardMark : torch::autograd::Function<BackwardMark<kOpens>> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            int64_t name) {
    ctx->saved_data["name"] = name;
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto name = static_cast<uint32_t>(ctx->saved_data["name"].toInt());
    if (kOpens) {
      timeline::begin(timeline::Kind::Backward, name);
    } else {
      timeline::end(timeline::Kind::Backward, name);
    }
    return {grads[0], at::Tensor()};
  }
};

// Forward and backward spans for one block: forward around the call, backward between the
// marks on its first input and its output.
nn::ForwardHooks timed(uint32_t name) {
  nn::ForwardHooks hooks;
  hooks.around = [name](const std::vector<at::Tensor>& xs, const nn::ForwardHooks::Forward& f) {
    if (!timeline::enabled()) return f(xs);
    const bool backward = at::GradMode::is_enabled() && !nn::recomputing();
    std::vector<at::Tensor> in = xs;
    if (backward && !in.empty() && in[0].defined() && in[0].requires_grad())
      in[0] = BackwardMark<false>::apply(in[0], static_cast<int64_t>(name));
    at::Tensor out;
    {
      timeline::Scope span(nn::recomputing() ? timeline::Kind::Recompute : timeline::Kind::Forward,
                           name);
      out = f(in);
    }
    if (backward && out.defined() && out.requires_grad())
      out = BackwardMark<true>::apply(out, static_cast<int64_t>(name));
    return out;
  };
  return hooks;
}

std::string rank_label(const mesh::DeviceMesh* mesh) {
  if (!mesh) return "rank 0";
  std::string s = "rank " + std::to_string(mesh->rank()) + " (";
  for (size_t i = 0; i < mesh->dim_names().size(); ++i)
    s += (i ? ", " : "") + mesh->dim_names()[i] + "=" + std::to_string(mesh->coordinate()[i]);
  return s + ")";
}

void write_file(const std::string& path, const std::string& text) {
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  checkpoint::write_text_durably(path, text, "log.timeline.out");
}

std::string per_rank_path(const std::string& out, int rank) {
  std::filesystem::path p(out);
  const std::string stem = p.extension() == ".json" ? p.stem().string() : p.filename().string();
  return (p.parent_path() / (stem + ".rank-" + std::to_string(rank) + ".json")).string();
}

}  // namespace

TimelineWindow::TimelineWindow(const Config& config, const mesh::DeviceMesh* mesh,
                               torch::nn::Module& model, const std::string& block_pattern)
    : config_(config), mesh_(mesh) {
  std::tie(first_, last_) = timeline_window(config.log.timeline, config.train.steps);
  if (block_pattern.empty()) return;
  for (const auto& item : model.named_modules()) {
    if (!nn::block_match(block_pattern, item.key())) continue;
    const torch::nn::Module* m = item.value().get();
    links_.push_back(nn::add_forward_hook(*m, nn::HookSlot::Timeline,
                                          timed(timeline::intern(item.key()))));
  }
}

TimelineWindow::~TimelineWindow() {
  timeline::set_enabled(false);
}

void TimelineWindow::before_step(int64_t step) {
  if (step > first_ && step <= last_) {
    // A long window measures the offsets again every few minutes (clocks drift apart); rank 0
    // decides, so every rank joins the same exchange. Not recorded.
    timeline::set_enabled(false);
    const bool due = dist::all_max(mesh_ && mesh_->rank() == 0 &&
                                   timeline::now_ns() - clock_.back().at_ns > kResyncNs) != 0;
    if (due) {
      const auto c = dist::estimate_clock_offset();
      clock_.push_back({c.at_ns, c.offset_ns, c.error_ns});
    }
    timeline::set_enabled(true);
    return;
  }
  if (step != first_) return;
  timeline::drain();  // what earlier windows' stragglers left
  const auto c = dist::estimate_clock_offset();
  clock_ = {{c.at_ns, c.offset_ns, c.error_ns}};
  begin_ns_ = timeline::now_ns();
  // On a GPU, compute spans are timed by CUDA events on the stream that runs them.
  if (mesh_ ? mesh_->device_type() == "cuda"
            : dist::is_initialized() && dist::device_type() == "cuda")
    timeline::set_device_timing(true);
  timeline::set_enabled(true);
}

std::optional<timeline::Summary> TimelineWindow::after_step(int64_t step) {
  if (step != last_) return std::nullopt;
  timeline::set_enabled(false);
  timeline::discard_open();
  timeline::RankTrace mine;
  mine.window_begin_ns = begin_ns_;
  mine.window_end_ns = timeline::now_ns();
  mine.spans = timeline::drain();
  timeline::set_device_timing(false);
  const auto c = dist::estimate_clock_offset();  // again: offsets interpolate across the window
  clock_.push_back({c.at_ns, c.offset_ns, c.error_ns});
  mine.clock = clock_;
  mine.rank = mesh_ ? mesh_->rank() : 0;
  mine.label = rank_label(mesh_);
  if (mesh_ && mesh_->size() == dist::world_size()) {  // its full set's group is the world
    for (const auto& d : mesh_->dim_names())
      mine.world_dims += (mine.world_dims.empty() ? "" : "+") + d;
  }
  const auto all = dist::gather_text(timeline::serialize(mine), 0);
  if (mine.rank != 0) return std::nullopt;

  std::vector<timeline::RankTrace> traces;
  for (const auto& bytes : all) traces.push_back(timeline::deserialize(bytes));
  const timeline::Merged merged = timeline::merge(traces);
  const timeline::Summary summary = timeline::summarize(merged);
  const auto& tl = config_.log.timeline;
  const std::string out = tl.out.empty() ? "timeline.json" : tl.out;
  const std::string window = std::to_string(first_) + "-" + std::to_string(last_);
  const std::string trace = timeline::chrome_trace_json(
      merged, "{\"steps\":\"" + window + "\",\"summary\":" + summary.to_json() + "}");
  write_file(out, trace);
  if (tl.per_rank) {
    for (size_t i = 0; i < merged.ranks.size(); ++i)
      write_file(
          per_rank_path(out, merged.ranks[i].rank),
          timeline::rank_trace_json(
              merged, i, dist::is_initialized() ? to_string(dist::world().backend()) : "gloo"));
  }
  size_t spans = 0;
  int64_t dropped = 0;
  for (const auto& r : merged.ranks) spans += r.spans.size(), dropped += r.dropped;
  const int64_t steps = last_ - first_ + 1;
  char line[512];
  std::snprintf(line, sizeof(line),
                "timeline: steps %s on %zu ranks -> %s (%zu spans, %.1f KB per step); where the "
                "step time went:",
                window.c_str(), merged.ranks.size(), out.c_str(), spans,
                static_cast<double>(trace.size()) / 1024.0 / static_cast<double>(steps));
  log::info(line);
  if (dropped > 0)
    log::warn("timeline: " + std::to_string(dropped) +
              " spans were dropped (a thread's ring filled); use a shorter log.timeline.steps");
  const std::string text = summary.to_text();
  for (size_t p = 0; p < text.size();) {
    size_t q = text.find('\n', p);
    if (q == std::string::npos) q = text.size();
    log::info(text.substr(p, q - p));
    p = q + 1;
  }
  return summary;
}

}  // namespace vescale::train
