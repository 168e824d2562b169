#include "tokenizer/encode_pool.h"

namespace vescale::tokenizer {

EncodePool::EncodePool(int threads, Encode encode) : encode_(std::move(encode)) {
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

EncodePool::~EncodePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

std::future<EncodePool::Ids> EncodePool::submit(std::string text, bool first) {
  Job job{std::move(text), first, {}};
  auto f = job.result.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
  return f;
}

void EncodePool::work() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    try {
      Ids ids;
      encode_(job.text, job.first, ids);
      job.result.set_value(std::move(ids));
    } catch (...) {
      job.result.set_exception(std::current_exception());
    }
  }
}

}  // namespace vescale::tokenizer
