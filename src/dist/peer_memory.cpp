#include "vescale/dist/peer_memory.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "dist/store.h"
#include "dist/world_state.h"
#include "vescale/common/check.h"
#include "vescale/common/error_text.h"

namespace vescale::dist {

namespace {

// Agent store keys (the launchers' store, outside any round's prefix), per slot.
const std::string kLatest = "vescale/memory/latest";  // "<slot> <step>"
std::string index_key(int slot) { return "vescale/memory/slot" + std::to_string(slot) + "/index"; }
std::string where_key(int slot, const std::string& file) {
  return "vescale/memory/slot" + std::to_string(slot) + "/where/" + file;
}
// A keeper's key for a part.
std::string part_key(int slot, const std::string& file) {
  return "slot" + std::to_string(slot) + "/" + file;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The launchers' store: under the round's prefix for the ranks, so the raw one is below it.
c10d::Store& agent_store() {
  auto& s = world_state();
  VESCALE_CHECK(s.env.agent_store, "peer memory: not launched by vescale-run's agent");
  auto* prefixed = dynamic_cast<c10d::PrefixStore*>(s.store.get());
  VESCALE_CHECK(prefixed, "peer memory: the agent's store has no round prefix");
  return *prefixed->getUnderlyingStore();
}

struct Keepers {
  std::mutex mu;
  std::map<std::string, c10::intrusive_ptr<c10d::Store>> clients;  // "host:port" -> client
  std::set<std::string> unreachable;
};
Keepers& keepers() {
  static Keepers k;
  return k;
}

// A client of the keeper at "host:port"; nullptr when it does not answer (a lost node).
c10d::Store* keeper(const std::string& where) {
  auto& k = keepers();
  if (k.unreachable.count(where)) return nullptr;
  auto it = k.clients.find(where);
  if (it != k.clients.end()) return it->second.get();
  const auto colon = where.rfind(':');
  try {
    // A lost node's keeper must not stall a recovery long: 3 s to connect.
    auto client = join_tcp_store(where.substr(0, colon), std::stoi(where.substr(colon + 1)),
                                 std::chrono::seconds(3));
    client->setTimeout(std::chrono::seconds(60));  // parts are large: their transfers may take long
    return (k.clients[where] = client).get();
  } catch (const std::exception&) {
    k.unreachable.insert(where);
    return nullptr;
  }
}

// Parts travel in pieces: c10d's store takes values of at most 8 MiB.
constexpr size_t kPiece = size_t{4} << 20;

void put_part(c10d::Store& s, const std::string& key, const std::string& data) {
  const size_t n = (data.size() + kPiece - 1) / kPiece;
  for (size_t i = 0; i < n; ++i) {
    const size_t at = i * kPiece, len = std::min(kPiece, data.size() - at);
    s.set(key + "/" + std::to_string(i),
          std::vector<uint8_t>(data.begin() + static_cast<std::ptrdiff_t>(at),
                               data.begin() + static_cast<std::ptrdiff_t>(at + len)));
  }
  set_text(s, key, std::to_string(n));  // last: a part is whole once its count is there
}

std::string get_part(c10d::Store& s, const std::string& key) {
  const size_t n = std::stoull(get_text(s, key));
  std::string data;
  for (size_t i = 0; i < n; ++i) {
    const auto piece = s.get(key + "/" + std::to_string(i));
    data.append(piece.begin(), piece.end());
  }
  return data;
}

std::vector<std::string> my_keepers() {
  const char* env = std::getenv("VESCALE_KEEPERS");
  return env ? split(env) : std::vector<std::string>{};
}

}  // namespace

bool peer_memory_available() {
  return is_initialized() && world_state().env.agent_store && !my_keepers().empty();
}

std::optional<KeptSnapshot> latest_snapshot() {
  auto& s = agent_store();
  if (!s.check({kLatest})) return std::nullopt;
  KeptSnapshot snap;
  std::istringstream(get_text(s, kLatest)) >> snap.slot >> snap.step;
  snap.index_json = get_part(s, index_key(snap.slot));
  return snap;
}

int next_slot() {
  auto& s = agent_store();
  if (!s.check({kLatest})) return 0;
  int slot = 0;
  std::istringstream(get_text(s, kLatest)) >> slot;
  return 1 - slot;
}

void keep_part(int slot, const std::string& file, const std::string& data) {
  const auto where = my_keepers();
  VESCALE_CHECK(!where.empty(), "peer memory: VESCALE_KEEPERS is not set (not under vescale-run)");
  auto& k = keepers();
  std::lock_guard<std::mutex> lock(k.mu);
  for (const auto& w : where) {
    c10d::Store* s = keeper(w);
    VESCALE_CHECK(s, "peer memory: the launcher keeping copies at ", w,
                  " does not answer; its node may be gone");
    put_part(*s, part_key(slot, file), data);
  }
  std::string list;
  for (const auto& w : where) list += (list.empty() ? "" : ",") + w;
  set_text(agent_store(), where_key(slot, file), list);
}

void publish_snapshot(int slot, int64_t step, const std::string& index_json) {
  auto& s = agent_store();
  put_part(s, index_key(slot), index_json);  // an index may pass the store's 8 MiB
  set_text(s, kLatest, std::to_string(slot) + " " + std::to_string(step));
}

bool snapshot_reachable(const KeptSnapshot& snap, const std::vector<std::string>& files) {
  auto& k = keepers();
  std::lock_guard<std::mutex> lock(k.mu);
  for (const auto& file : files) {
    if (!agent_store().check({where_key(snap.slot, file)})) return false;
    bool found = false;
    for (const auto& w : split(get_text(agent_store(), where_key(snap.slot, file)))) {
      c10d::Store* s = keeper(w);
      try {
        found = s && s->check({part_key(snap.slot, file)});
      } catch (const std::exception&) {
        found = false;
      }
      if (found) break;
    }
    if (!found) return false;
  }
  return true;
}

std::string fetch_part(const KeptSnapshot& snap, const std::string& file) {
  auto& k = keepers();
  std::lock_guard<std::mutex> lock(k.mu);
  const std::string where = get_text(agent_store(), where_key(snap.slot, file));
  for (const auto& w : split(where)) {
    c10d::Store* s = keeper(w);
    try {
      if (s && s->check({part_key(snap.slot, file)}))
        return get_part(*s, part_key(snap.slot, file));
    } catch (const std::exception&) {
    }
  }
  VESCALE_FAIL("peer memory: no launcher still holds ", file, " of the copy after step ", snap.step,
               " (kept by ", where, ")");
}

}  // namespace vescale::dist
