// One run per checkpoint root. Two runs writing the same root interleave their saves and move
// `latest` under each other; the lock makes the second one stop at start, naming the first.
// The lock is a file "<root>/.lock" holding the holder's host, PID and start time, and an
// advisory lock (flock) on it for the holder's lifetime, which the kernel drops when the holder
// dies. A lock file left by a dead process on this host is taken over with a warning. The lock is
// per process: several RootLocks of one process on one root share it (an embedder's Trainers).
#pragma once
#include <string>

namespace vescale::checkpoint {

class RootLock {
 public:
  // Takes the lock on `root` (made if missing) for `who` ("vescale-train run 1733-0a1b", for the
  // file). Throws naming the holder (host, PID, start time) and the fix when another live
  // process holds it. Not collective: one process of a run takes it (rank 0). Thread-safe.
  RootLock(const std::string& root, const std::string& who);
  // The last of this process's locks on the root removes the lock file.
  ~RootLock();
  RootLock(const RootLock&) = delete;
  RootLock& operator=(const RootLock&) = delete;

  // What the lock file held when a stale lock was taken over ("" when there was none): for the
  // caller's warning.
  const std::string& took_over() const { return took_over_; }

  static constexpr const char* kFile = ".lock";

 private:
  std::string path_;
  int fd_ = -1;
  std::string took_over_;
};

}  // namespace vescale::checkpoint
