#include "dist/node_rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <tuple>

#include "dist/store.h"
#include "vescale/common/check.h"
#include "vescale/common/error_text.h"

namespace vescale::dist {

namespace {

using Clock = std::chrono::steady_clock;

std::string key(int round, const char* what) {
  return "vescale/rdzv/" + std::to_string(round) + "/" + what;
}

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// A listening socket on exactly addr:port, or -1 when the address is not this host's or the port
// is taken (another launcher serves there): whoever binds it serves the store.
int listen_exactly(const std::string& addr, int port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (const addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return fd;
}

// This host's address on the way to `addr` (what the other nodes reach it by).
std::string local_address_towards(const std::string& addr, int port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  std::string local = "127.0.0.1";
  if (::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return local;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in me{};
  socklen_t len = sizeof me;
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0) {
    char buf[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf)) local = buf;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return local;
}

// A store server on a free port of `addr`; its "host:port".
std::pair<c10::intrusive_ptr<c10d::Store>, std::string> serve_keeper(const std::string& addr) {
  const int fd = listen_exactly(addr, 0);
  VESCALE_CHECK(fd >= 0, "vescale-run: cannot open a port on ", addr,
                " for the checkpoint copies this launcher keeps");
  sockaddr_in me{};
  socklen_t len = sizeof me;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len);
  const int port = ntohs(me.sin_port);
  return {serve_tcp_store(addr, port, fd, std::chrono::minutes(5)),
          addr + ":" + std::to_string(port)};
}

}  // namespace

NodeRendezvous::NodeRendezvous(const LauncherOptions& o) : options_(o) {
  port_ = o.master_port > 0 ? o.master_port : (o.nnodes == 1 ? find_free_port() : 29500);
  const auto timeout = ms(o.rdzv_timeout_s);
  if (const int fd = listen_exactly(o.master_addr, port_); fd >= 0) {
    try {
      server_ = serve_tcp_store(o.master_addr, port_, fd, timeout);
      serving_ = true;
    } catch (const std::exception& e) {
      ::close(fd);
      VESCALE_FAIL("vescale-run: could not serve the rendezvous on ", o.master_addr, ":", port_,
                   " (", error_text(e), "); pick another --master-port");
    }
  }
  try {
    store_ = join_tcp_store(o.master_addr, port_, timeout);
  } catch (const std::exception& e) {
    VESCALE_FAIL("vescale-run: could not reach the rendezvous at ", o.master_addr, ":", port_,
                 " within ", o.rdzv_timeout_s, " s (", error_text(e),
                 "). Start the launcher on --master-addr's host too, or check --master-addr and "
                 "--master-port");
  }
  try {
    std::tie(keeper_, keeper_at_) =
        serve_keeper(serving_ ? o.master_addr : local_address_towards(o.master_addr, port_));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    VESCALE_FAIL("vescale-run: cannot serve the store that keeps checkpoint copies (",
                 error_text(e), ")");
  }
}

NodeRendezvous::~NodeRendezvous() {
  // The store goes with this launcher: first let the last round's launchers read how it ended
  // (they may still be stopping their ranks) and waiting ones read that the job ended.
  if (!serving_ || !in_round_) return;
  try {
    const auto deadline = Clock::now() + std::chrono::seconds(10) + ms(options_.grace_seconds);
    while (store_->add(key(last_.number, "left"), 0) < last_.nnodes && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  } catch (const std::exception&) {
  }
}

std::optional<Round> NodeRendezvous::join() {
  auto& s = *store_;
  int k = std::max<int>(next_, static_cast<int>(s.add("vescale/rdzv/open", 0)));
  for (;;) {
    // The serving launcher forms every round, so it is in every round: node 0. The others are
    // numbered in the order they join.
    const int index = serving_ ? 0 : static_cast<int>(s.add(key(k, "joined"), 1));
    if (serving_) form(k);
    while (!s.check({key(k, "formed")})) {
      if (finished()) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const int nnodes = std::stoi(get_text(s, key(k, "formed")));
    if (index < nnodes) {
      next_ = k + 1;
      set_text(s, key(k, "keeper/") + std::to_string(index), keeper_at_);
      last_ = Round{k, index, nnodes};
      in_round_ = true;
      return last_;
    }
    ++k;  // too late for round k, or beyond MAX: the next round takes this launcher
  }
}

void NodeRendezvous::form(int k) {
  auto& s = *store_;
  const int lo = options_.min_nodes > 0 ? options_.min_nodes : options_.nnodes,
            hi = options_.nnodes;
  // This launcher and the others that joined.
  auto joined = [&] { return 1 + static_cast<int>(s.add(key(k, "joined"), 0)); };
  const auto deadline = Clock::now() + ms(options_.rdzv_timeout_s);
  while (joined() < lo) {
    if (finished()) return;  // the job ended meanwhile: join() sees it
    if (Clock::now() > deadline) {
      finish(1);
      VESCALE_FAIL("vescale-run: only ", joined(), " of at least ", lo,
                   " nodes (--nnodes) joined round ", k,
                   " within --rdzv-timeout=", options_.rdzv_timeout_s,
                   " s; start the other nodes' launchers, or lower --nnodes");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto last_call = Clock::now() + ms(options_.rdzv_last_call_s);
  while (joined() < hi && Clock::now() < last_call && !finished())
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int nnodes = std::min(joined(), hi);
  set_text(s, "vescale/rdzv/open", std::to_string(k + 1));  // later launchers join round k + 1
  set_text(s, key(k, "formed"), std::to_string(nnodes));
}

Interrupt NodeRendezvous::poll(const Round& r) {
  const auto now = Clock::now();
  if (now - polled_ < std::chrono::milliseconds(250)) return Interrupt::None;
  polled_ = now;
  auto& s = *store_;
  try {
    if (s.check({key(r.number, "failed")})) return Interrupt::Now;
  } catch (const std::exception&) {
    return Interrupt::Now;  // the store is gone: the caller's next call says so
  }
  return node_waiting(r) ? Interrupt::Graceful : Interrupt::None;
}

bool NodeRendezvous::node_waiting(const Round& r) {
  try {
    return r.nnodes < options_.nnodes && store_->add(key(r.number + 1, "joined"), 0) > 0;
  } catch (const std::exception&) {
    return false;
  }
}

void NodeRendezvous::leave(const Round& r) {
  try {
    store_->add(key(r.number, "left"), 1);
  } catch (const std::exception&) {
  }
}

void NodeRendezvous::fail(const Round& r, const RoundFailure& f) {
  auto& s = *store_;
  if (s.add(key(r.number, "failures"), 1) != 1) return;  // another launcher was first
  if (!f.final) s.add("vescale/rdzv/restarts", 1);
  set_text(s, key(r.number, "failure"),
           std::to_string(f.exit_code) + (f.final ? " final " : " restart ") + f.what);
  set_text(s, key(r.number, "failed"), "1");
}

RoundFailure NodeRendezvous::failure(const Round& r) {
  auto& s = *store_;
  s.wait({key(r.number, "failure")});
  const std::string text = get_text(s, key(r.number, "failure"));
  RoundFailure f;
  const auto a = text.find(' '), b = text.find(' ', a + 1);
  f.exit_code = std::stoi(text.substr(0, a));
  f.final = text.substr(a + 1, b - a - 1) == "final";
  f.what = text.substr(b + 1);
  return f;
}

std::string NodeRendezvous::keepers(const Round& r) {
  if (r.nnodes == 1) return keeper_at_;
  const std::string next = key(r.number, "keeper/") + std::to_string((r.node_rank + 1) % r.nnodes);
  try {
    store_->wait({next}, std::chrono::seconds(60));
  } catch (const std::exception&) {
    std::fprintf(stderr,
                 "vescale-run: node %d of round %d did not say where it keeps copies within "
                 "60 s; this node's ranks keep theirs here only\n",
                 (r.node_rank + 1) % r.nnodes, r.number);
    return keeper_at_;
  }
  return keeper_at_ + "," + get_text(*store_, next);
}

int64_t NodeRendezvous::restarts() { return store_->add("vescale/rdzv/restarts", 0); }

std::optional<int64_t> NodeRendezvous::progress(const Round& r, const char* what) {
  const std::string k = attempt_prefix(r.number) + "/" + progress_key(what);
  if (!store_->check({k})) return std::nullopt;
  return std::stoll(get_text(*store_, k));
}

void NodeRendezvous::finish(int exit_code) {
  try {
    set_text(*store_, "vescale/rdzv/finished", std::to_string(exit_code));
  } catch (const std::exception&) {
    // The serving launcher ended first: nobody is left waiting to read it.
  }
}

std::optional<int> NodeRendezvous::finished() {
  if (!store_->check({"vescale/rdzv/finished"})) return std::nullopt;
  return std::stoi(get_text(*store_, "vescale/rdzv/finished"));
}

}  // namespace vescale::dist
