// A fixed set of worker threads encoding chunks of text, each keeping its tokenizer's piece
// cache warm; results come back as futures, to be taken in submission order.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace vescale::tokenizer {

class EncodePool {
 public:
  using Ids = std::vector<int64_t>;
  // encode(text, first, ids): `first` says whether the chunk starts the stream.
  using Encode = std::function<void(const std::string&, bool, Ids&)>;
  EncodePool(int threads, Encode encode);
  ~EncodePool();  // finishes the queued chunks
  EncodePool(const EncodePool&) = delete;
  EncodePool& operator=(const EncodePool&) = delete;
  // The future holds the ids, or the exception encode threw.
  std::future<Ids> submit(std::string text, bool first);

 private:
  struct Job {
    std::string text;
    bool first = false;
    std::promise<Ids> result;
  };
  void work();

  Encode encode_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace vescale::tokenizer
