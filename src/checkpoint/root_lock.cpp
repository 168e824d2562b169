#include "vescale/checkpoint/root_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

#include "vescale/common/check.h"

namespace vescale::checkpoint {

namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

std::string read_all(int fd) {
  std::string s;
  char buf[512];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// "host=a pid=12 started=2026-12-03T09:30:00Z who=...": the value of `key`, "" if absent.
std::string field(const std::string& text, const std::string& key) {
  const std::string k = key + "=";
  for (size_t at = 0; (at = text.find(k, at)) != std::string::npos; at += k.size()) {
    if (at != 0 && text[at - 1] != ' ') continue;
    const size_t end = text.find(' ', at);
    return text.substr(at + k.size(), end == std::string::npos ? end : end - at - k.size());
  }
  return "";
}

bool alive_here(const std::string& text) {
  const std::string pid = field(text, "pid");
  if (field(text, "host") != host_name() || pid.empty()) return true;  // can't tell: assume alive
  const long p = std::strtol(pid.c_str(), nullptr, 10);
  if (p <= 0 || (::kill(static_cast<pid_t>(p), 0) != 0 && errno == ESRCH)) return false;
  // A killed process whose parent died too stays a zombie until init reaps it: dead.
  std::ifstream status("/proc/" + std::to_string(p) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("State:", 0) == 0) return line.find('Z') == std::string::npos;
  return true;
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The locks this process holds, by file: its Trainers share one (an embedder's runs one after
// another, a test's resumed copy beside the first), counted.
struct Held {
  int fd = -1;
  int users = 0;
};
std::mutex g_mu;
std::map<std::string, Held> g_held;

}  // namespace

RootLock::RootLock(const std::string& root, const std::string& who) {
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  path_ = (std::filesystem::path(root) / kFile).string();
  const std::string key = std::filesystem::weakly_canonical(path_, ec).string();
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto it = g_held.find(key); it != g_held.end()) {
    ++it->second.users;
    fd_ = it->second.fd;
    return;
  }
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  VESCALE_CHECK(fd_ >= 0, "checkpoint.dir '", root, "': cannot create its lock file '", path_,
                "': ", std::strerror(errno), "; choose a folder this user can write");
  const std::string holder = read_all(fd_);
  const auto refuse = [&](const std::string& why) {
    ::close(fd_);
    fd_ = -1;
    VESCALE_FAIL("checkpoint.dir '", root, "' is in use by another run (", why,
                 holder.empty() ? "" : ": " + holder,
                 "); two runs on one folder overwrite each other's checkpoints. Wait for it, give "
                 "this run another checkpoint.dir, or, if that run is gone, delete ",
                 path_);
  };
  // The kernel's lock decides for processes on this host (and where the file system passes
  // flock on); the file's PID decides for a holder on this host whose lock did not reach us.
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) refuse("it holds the lock");
  if (!holder.empty()) {
    if (alive_here(holder)) refuse("its lock file names a live process or another host");
    took_over_ = holder;
  }
  const std::string mine = "host=" + host_name() + " pid=" + std::to_string(::getpid()) +
                           " started=" + now_utc() + " who=" + who + "\n";
  const bool written = ::ftruncate(fd_, 0) == 0 && ::lseek(fd_, 0, SEEK_SET) == 0 &&
                       ::write(fd_, mine.data(), mine.size()) == static_cast<ssize_t>(mine.size());
  if (!written) {
    ::close(fd_);
    fd_ = -1;
    VESCALE_FAIL("checkpoint.dir '", root, "': cannot write its lock file '", path_,
                 "': ", std::strerror(errno),
                 " (a full disk?); free space or choose another folder");
  }
  g_held[key] = {fd_, 1};
}

RootLock::~RootLock() {
  if (fd_ < 0) return;
  std::error_code ec;
  const std::string key = std::filesystem::weakly_canonical(path_, ec).string();
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_held.find(key);
  if (it != g_held.end() && --it->second.users > 0) return;
  if (it != g_held.end()) g_held.erase(it);
  ::unlink(path_.c_str());
  ::close(fd_);  // drops the flock
}

}  // namespace vescale::checkpoint
