#include "dist/store.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "vescale/common/check.h"

namespace vescale::dist {

c10::intrusive_ptr<c10d::Store> make_store(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  if (env.world_size == 1) return c10::make_intrusive<c10d::HashStore>();
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(env.master_port);
  opts.isServer = env.rank == 0;
  opts.numWorkers = env.world_size;
  opts.waitWorkers = true;
  opts.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  } catch (const std::exception& e) {
    if (env.rank == 0) {
      VESCALE_FAIL("rendezvous: rank 0 could not serve the store on ", env.master_addr, ":", env.master_port,
                   " or not all ", env.world_size, " ranks joined within ", timeout.count(),
                   " ms. If the port is in use, pick another MASTER_PORT. (", e.what(), ")");
    }
    VESCALE_FAIL("rendezvous: rank ", env.rank, " could not reach rank 0's store at ", env.master_addr, ":",
                 env.master_port, " within ", timeout.count(),
                 " ms. Check MASTER_ADDR/MASTER_PORT and that rank 0 started. (", e.what(), ")");
  }
}

c10::intrusive_ptr<c10d::Store> prefixed(const std::string& prefix, const c10::intrusive_ptr<c10d::Store>& store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
}

}  // namespace vescale::dist
