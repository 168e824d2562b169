#include "dist/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "vescale/common/check.h"
#include "vescale/dist/launch_env.h"

namespace vescale::dist {

namespace {

volatile sig_atomic_t g_signal = 0, g_signals = 0;
void on_signal(int sig) {
  g_signal = sig;
  g_signals = g_signals + 1;
}

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  std::string out_buf, err_buf;
  bool running = true;
  int status = 0;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Writes whole lines of `buf` to `fd`, each behind "[rank k] ", keeping the unfinished tail.
void emit_lines(int rank, std::string& buf, int fd, bool flush_tail) {
  const std::string prefix = "[rank " + std::to_string(rank) + "] ";
  size_t start = 0, nl;
  std::string out;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    out += prefix + buf.substr(start, nl - start + 1);
    start = nl + 1;
  }
  buf.erase(0, start);
  if (flush_tail && !buf.empty()) {
    out += prefix + buf + "\n";
    buf.clear();
  }
  for (size_t off = 0; off < out.size();) {
    ssize_t n = ::write(fd, out.data() + off, out.size() - off);
    if (n <= 0 && errno != EINTR) break;
    if (n > 0) off += static_cast<size_t>(n);
  }
}

// Reads what is available on one pipe; closes it at EOF.
void drain(Rank& r, int& fd, std::string& buf, int out_fd) {
  char chunk[8192];
  ssize_t n = ::read(fd, chunk, sizeof chunk);
  if (n > 0) {
    buf.append(chunk, static_cast<size_t>(n));
    emit_lines(r.rank, buf, out_fd, false);
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    emit_lines(r.rank, buf, out_fd, true);
    ::close(fd);
    fd = -1;
  }
}

void signal_all(std::vector<Rank>& ranks, int sig) {
  for (auto& r : ranks)
    if (r.running) ::kill(-r.pid, sig);  // each rank leads its own process group
}

// The pipes are close-on-exec (dup2 onto stdout/stderr clears the flag for those two), so a
// rank holds no other rank's pipe ends. A rank dies with the launcher (SIGKILL, not SIGTERM: a
// SIGTERM would make vescale-train save and move `latest` with nobody watching).
pid_t spawn(const std::vector<std::string>& argv, const std::string& argv0,
            const std::vector<std::pair<std::string, std::string>>& env, int out_w, int err_w) {
  const pid_t launcher = ::getpid();
  pid_t pid = ::fork();
  VESCALE_CHECK(pid >= 0, "launcher: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(128 + SIGKILL);  // it died before prctl took effect
    ::setpgid(0, 0);
    ::dup2(out_w, STDOUT_FILENO);
    ::dup2(err_w, STDERR_FILENO);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    // Launches by other tools would shadow ours; the torchrun-style variables win anyway,
    // but removing these keeps a rank's view unambiguous.
    for (const char* k :
         {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID"})
      ::unsetenv(k);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (!argv0.empty()) args[0] = const_cast<char*>(argv0.c_str());
    ::execvp(argv[0].c_str(), args.data());
    std::fprintf(stderr, "launcher: cannot run '%s': %s\n", argv[0].c_str(), std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

}  // namespace

GroupResult run_worker_group(const LauncherOptions& o, const std::vector<std::string>& argv,
                             const WorkerPlace& place, const std::function<Interrupt()>& poll) {
  const int world = place.nnodes * o.nproc_per_node;
  // Each rank's share of the cores, unless the caller chose (torchrun does the same).
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const std::string threads =
      omp && *omp ? std::string(omp) : std::to_string(threads_per_rank(o.nproc_per_node));

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_signal = 0;
  g_signals = 0;

  std::vector<Rank> ranks(o.nproc_per_node);
  for (int local = 0; local < o.nproc_per_node; ++local) {
    Rank& r = ranks[local];
    r.rank = place.node_rank * o.nproc_per_node + local;
    int out_p[2], err_p[2];
    VESCALE_CHECK(::pipe2(out_p, O_CLOEXEC) == 0 && ::pipe2(err_p, O_CLOEXEC) == 0,
                  "launcher: pipe failed: ", std::strerror(errno));
    std::vector<std::pair<std::string, std::string>> env = {
        {"RANK", std::to_string(r.rank)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(local)},
        {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
        {"GROUP_RANK", std::to_string(place.node_rank)},
        {"MASTER_ADDR", place.master_addr},
        {"MASTER_PORT", std::to_string(place.master_port)},
        {"OMP_NUM_THREADS", threads},
        {"VESCALE_RANK_PREFIXED", "1"},
        {"VESCALE_LAUNCHED",
         "1"},  // apps that launch themselves (vescale-train) know they're a rank
    };
    env.insert(env.end(), place.env.begin(), place.env.end());
    r.pid = spawn(argv,
                  o.rank_name.empty() ? "" : o.rank_name + "[rank " + std::to_string(r.rank) + "]",
                  env, out_p[1], err_p[1]);
    ::close(out_p[1]);
    ::close(err_p[1]);
    r.out_fd = out_p[0];
    r.err_fd = err_p[0];
  }

  GroupResult result;
  int& exit_code = result.exit_code;
  int forwarded = 0;
  std::optional<std::chrono::steady_clock::time_point> kill_at, all_exited_at;
  auto stop_others = [&](const std::string& why) {
    if (kill_at) return;
    if (!why.empty())
      std::fprintf(stderr, "vescale-run: %s; stopping the other ranks\n", why.c_str());
    signal_all(ranks, SIGTERM);
    kill_at = std::chrono::steady_clock::now() +
              std::chrono::milliseconds(static_cast<int64_t>(o.grace_seconds * 1000));
  };

  for (;;) {
    // A signal we received goes to every rank, which may take its time to stop cleanly
    // (vescale-train finishes its step and saves): no SIGKILL timer. A second signal is
    // forwarded too (such ranks then stop at once); a third kills them.
    if (g_signals > forwarded) {
      ++forwarded;
      result.signalled = true;
      const int sig = g_signal;
      std::fprintf(stderr, "vescale-run: received %s; %s\n", strsignal(sig),
                   forwarded == 1 ? "passing it to every rank (send it again to stop them at once)"
                   : forwarded == 2 ? "passing it on again"
                                    : "killing every rank");
      signal_all(ranks, forwarded >= 3 ? SIGKILL : sig);
    }
    // The caller's stop (a peer node failed, a node joined): once.
    if (result.interrupted == Interrupt::None && !exit_code && !result.signalled) {
      result.interrupted = poll();
      if (result.interrupted == Interrupt::Graceful) signal_all(ranks, SIGTERM);
      if (result.interrupted == Interrupt::Now) stop_others("");
    }
    // Output.
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, bool>> owners;  // (rank, is_stderr)
    for (auto& r : ranks) {
      if (r.out_fd >= 0) fds.push_back({r.out_fd, POLLIN, 0}), owners.push_back({&r, false});
      if (r.err_fd >= 0) fds.push_back({r.err_fd, POLLIN, 0}), owners.push_back({&r, true});
    }
    if (!fds.empty() && ::poll(fds.data(), fds.size(), 50) > 0) {
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Rank& r = *owners[i].first;
        if (owners[i].second)
          drain(r, r.err_fd, r.err_buf, STDERR_FILENO);
        else
          drain(r, r.out_fd, r.out_buf, STDOUT_FILENO);
      }
    } else if (fds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // Exits.
    bool any_running = false;
    for (auto& r : ranks) {
      if (!r.running) continue;
      int status = 0;
      pid_t p = ::waitpid(r.pid, &status, WNOHANG);
      if (p == r.pid) {
        r.running = false;
        r.status = status;
        // 130 as an exit code (not a death by SIGINT): the rank stopped cleanly on SIGINT
        // (vescale-train saves first), and its peers agree to stop after the same step.
        const bool stopped = WIFEXITED(status) && WEXITSTATUS(status) == 130;
        if (stopped && !exit_code) {
          exit_code = 130;
          std::fprintf(stderr, "vescale-run: rank %d stopped on SIGINT (exit 130)\n", r.rank);
        } else if (exit_code_of(status) != 0 && !exit_code) {
          exit_code = exit_code_of(status);
          result.failed_rank = r.rank;
          result.failure = "rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) +
                           ") failed with " + describe_status(status);
          // Also after a forwarded signal: a rank that died cannot join its peers' last save,
          // so they stop at once (for vescale-train this SIGTERM is the second signal).
          stop_others(result.failure);
        }
      } else {
        any_running = true;
      }
    }
    if (kill_at && std::chrono::steady_clock::now() >= *kill_at) {
      signal_all(ranks, SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
    bool open_pipes = false;
    for (auto& r : ranks) open_pipes |= r.out_fd >= 0 || r.err_fd >= 0;
    if (!any_running) {
      // Grandchildren may hold the pipes open; give their output a second, then stop.
      auto now = std::chrono::steady_clock::now();
      if (!all_exited_at) all_exited_at = now;
      if (!open_pipes || now - *all_exited_at > std::chrono::seconds(1)) break;
    }
  }
  for (auto& r : ranks) {
    if (r.out_fd >= 0) emit_lines(r.rank, r.out_buf, STDOUT_FILENO, true), ::close(r.out_fd);
    if (r.err_fd >= 0) emit_lines(r.rank, r.err_buf, STDERR_FILENO, true), ::close(r.err_fd);
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  for (auto& r : ranks)
    result.statuses += " rank " + std::to_string(r.rank) + ": " + describe_status(r.status) + ";";
  return result;
}

}  // namespace vescale::dist
