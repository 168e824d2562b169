#include "dist/store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cerrno>
#include <cstring>
#include <thread>

#include "vescale/common/check.h"
#include "vescale/common/error_text.h"

namespace vescale::dist {

namespace {

using Clock = std::chrono::steady_clock;

// c10d's TCPStore wire format (torch/csrc/distributed/c10d/TCPStoreBackend.hpp, pinned torch):
// a query type byte, then its arguments. VALIDATE carries a magic number and gets no answer;
// PING carries a nonce that the server echoes.
constexpr uint8_t kValidate = 0, kPing = 13;
constexpr uint32_t kValidateMagic = 0x3C85F7CE;

std::string printable(const char* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n && s.size() < 40; ++i) {
    const unsigned char c = static_cast<unsigned char>(p[i]);
    if (c >= 32 && c < 127)
      s += static_cast<char>(c);
    else if (c == '\r' || c == '\n')
      s += ' ';
    else
      s += '.';
  }
  return s;
}

int connect_once(const addrinfo* a, int timeout_ms) {
  int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
  if (fd < 0) return -1;
  if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return ::close(fd), -1;
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (::poll(&p, 1, timeout_ms) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
        err != 0)
      return ::close(fd), -1;
  }
  return fd;
}

// Before c10d's client (which waits without end on a peer that accepts and never answers), make
// sure the store answers: connect until the deadline (rank 0 may start late), then VALIDATE +
// PING and wait for the nonce. Throws naming what was found instead of a store.
void probe_store(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const int gai = ::getaddrinfo(env.master_addr.c_str(), std::to_string(env.master_port).c_str(),
                                &hints, &found);
  VESCALE_CHECK(gai == 0, "rendezvous: rank ", env.rank, " cannot resolve MASTER_ADDR '",
                env.master_addr, "': ", gai_strerror(gai),
                "; set MASTER_ADDR to rank 0's host name or address");
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> hold(found, ::freeaddrinfo);
  auto left_ms = [&] {
    return static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
  };
  int fd = -1;
  while (fd < 0) {
    for (const addrinfo* a = found; a && fd < 0; a = a->ai_next)
      fd = connect_once(a, std::min(left_ms(), 1000));
    if (fd >= 0) break;
    VESCALE_CHECK(left_ms() > 0, "rendezvous: rank ", env.rank,
                  " could not reach rank 0's store at ", where, " within ", timeout.count(),
                  " ms. Check MASTER_ADDR/MASTER_PORT and that rank 0 started");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const uint32_t nonce = static_cast<uint32_t>(::getpid()) ^ 0x5eedf00du;
  char msg[10];
  msg[0] = static_cast<char>(kValidate);
  std::memcpy(msg + 1, &kValidateMagic, 4);
  msg[5] = static_cast<char>(kPing);
  std::memcpy(msg + 6, &nonce, 4);
  const bool sent = ::send(fd, msg, sizeof msg, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof msg);
  char reply[64];
  size_t got = 0;
  while (sent && got < 4) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, left_ms()) != 1) break;
    const ssize_t n = ::recv(fd, reply + got, sizeof reply - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  uint32_t echoed = 0;
  if (got == 4) std::memcpy(&echoed, reply, 4);
  if (got == 4 && echoed == nonce) return;
  const std::string fix =
      " Another program holds that port, or rank 0 of this job uses another one: check "
      "MASTER_ADDR/MASTER_PORT (vescale-run --master-port)";
  VESCALE_CHECK(
      got > 0, "rendezvous: rank ", env.rank, " connected to ", where, " but it ",
      sent ? "did not answer the store handshake within " + std::to_string(timeout.count()) + " ms"
           : "closed the connection",
      "; it is not a vescale (c10d) store.", fix);
  VESCALE_FAIL("rendezvous: rank ", env.rank, " connected to ", where, " but it answered '",
               printable(reply, got),
               "', not the store protocol; it is not a vescale (c10d) store.", fix);
}

// Rank 0 binds the store's port; say so plainly when something else already listens there.
void check_port_free(const LaunchEnv& env) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
               sizeof one);  // as the store does: TIME_WAIT is no conflict
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(env.master_port));
  const bool in_use =
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno == EADDRINUSE;
  ::close(fd);
  VESCALE_CHECK(!in_use, "rendezvous: rank 0 cannot serve the store on port ", env.master_port,
                ": another program is listening there. Pick another MASTER_PORT (vescale-run "
                "--master-port), or "
                "stop what holds it (ss -ltnp | grep :",
                env.master_port, ")");
}

}  // namespace

c10::intrusive_ptr<c10d::Store> make_store(const LaunchEnv& env,
                                           std::chrono::milliseconds timeout) {
  // One process needs no store, unless an agent serves one (the progress, the copies in memory).
  if (env.world_size == 1 && !env.agent_store) return c10::make_intrusive<c10d::HashStore>();
  // Under an agent (torchrun's, or vescale-run's with restarts) the store already runs on
  // MASTER_PORT: every rank is a client, as PyTorch's own workers are. Otherwise rank 0 serves it.
  const bool serve = env.rank == 0 && !env.agent_store;
  if (serve)
    check_port_free(env);
  else
    probe_store(env, timeout);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(env.master_port);
  opts.isServer = serve;
  opts.numWorkers = env.world_size;
  opts.waitWorkers = true;
  opts.timeout = timeout;
  const auto start = Clock::now();
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
    // The agent's store outlives a restart of the ranks: each attempt keeps its own keys.
    if (env.agent_store) return prefixed(attempt_prefix(env.round), store);
    return store;
  } catch (const std::exception& e) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (serve && waited < timeout) {
      VESCALE_FAIL("rendezvous: rank 0 could not serve the store on ", env.master_addr, ":",
                   env.master_port, " (", error_text(e),
                   "). If the port is in use, pick another MASTER_PORT");
    }
    if (serve) {
      VESCALE_FAIL("rendezvous: not all ", env.world_size, " ranks joined rank 0's store at ",
                   env.master_addr, ":", env.master_port, " within ", timeout.count(),
                   " ms; check that every rank was started with the same MASTER_ADDR/MASTER_PORT "
                   "and WORLD_SIZE (",
                   error_text(e), ")");
    }
    VESCALE_FAIL("rendezvous: rank ", env.rank, " could not join rank 0's store at ",
                 env.master_addr, ":", env.master_port, " within ", timeout.count(),
                 " ms. Check MASTER_ADDR/MASTER_PORT and that rank 0 ", "started (", error_text(e),
                 ")");
  }
}

c10::intrusive_ptr<c10d::TCPStore> serve_tcp_store(const std::string& host, int port, int listen_fd,
                                                   std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = true;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  opts.masterListenFd = listen_fd;
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

c10::intrusive_ptr<c10d::TCPStore> join_tcp_store(const std::string& host, int port,
                                                  std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

std::string get_text(c10d::Store& store, const std::string& key) {
  const auto v = store.get(key);
  return {v.begin(), v.end()};
}

void set_text(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string attempt_prefix(int round) {
  return "vescale/attempt_" + std::to_string(round);  // PrefixStore adds the "/"
}

std::string progress_key(const std::string& what) { return "vescale/progress/" + what; }

c10::intrusive_ptr<c10d::Store> prefixed(const std::string& prefix,
                                         const c10::intrusive_ptr<c10d::Store>& store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
}

}  // namespace vescale::dist
