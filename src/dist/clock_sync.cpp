#include "vescale/dist/clock_sync.h"

#include <ATen/ATen.h>

#include <limits>

#include "vescale/dist/world.h"
#include "vescale/timeline/recorder.h"

namespace vescale::dist {

namespace {
constexpr int kPingTag = 0x7100, kPongTag = 0x7101;
}

// Rank r sends its time t1; rank 0 answers with its time t2 on arrival; r reads t3 on the
// answer. With symmetric delays rank 0's clock read t2 at r's (t1 + t3) / 2, and whatever the
// asymmetry the truth lies within half the round trip t3 - t1 of that.
ClockOffset estimate_clock_offset(int rounds) {
  ClockOffset out;
  out.at_ns = timeline::now_ns();
  if (!is_initialized() || world_size() == 1) return out;
  const bool was_on = timeline::enabled();
  timeline::set_enabled(false);  // the pings are not the run's communication
  ProcessGroup& w = world();
  const at::Device dev(device_string());
  at::Tensor msg = at::zeros({1}, at::TensorOptions().dtype(at::kLong).device(dev));
  auto read = [&] { return msg.cpu().data_ptr<int64_t>()[0]; };
  auto put = [&](int64_t v) { msg.fill_(v); };
  int64_t best = std::numeric_limits<int64_t>::max();
  for (int r = 1; r < w.size(); ++r) {
    for (int k = 0; k < rounds; ++k) {
      if (w.rank() == 0) {
        w.recv(msg, r, kPingTag).wait();
        put(timeline::now_ns());
        w.send(msg, r, kPongTag).wait();
      } else if (w.rank() == r) {
        const int64_t t1 = timeline::now_ns();
        put(t1);
        w.send(msg, 0, kPingTag).wait();
        w.recv(msg, 0, kPongTag).wait();
        const int64_t t3 = timeline::now_ns();
        const int64_t t2 = read();
        if (t3 - t1 < best) {
          best = t3 - t1;
          out.offset_ns = t2 - (t1 + t3) / 2;
          out.error_ns = (t3 - t1 + 1) / 2;
          out.at_ns = (t1 + t3) / 2;
        }
      }
    }
  }
  timeline::set_enabled(was_on);
  return out;
}

}  // namespace vescale::dist
