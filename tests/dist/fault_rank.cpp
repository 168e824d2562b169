// A rank that misbehaves on purpose, for the launcher tests.
//   fault_rank echo           each rank prints a line to stdout and to stderr, then exits 0
//   fault_rank exit R C       rank R exits with code C at once; the others sleep
//   fault_rank stall R        all ranks join the world; rank R then sleeps while the others
//   all_reduce fault_rank wait           prints "ready" and sleeps until signalled
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <ATen/ops/ones.h>

#include "vescale/common/check.h"
#include "vescale/dist/world.h"

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  int rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0");
  if (mode == "echo") {
    std::printf("hello from %d\n", rank);
    std::fprintf(stderr, "note from %d\n", rank);
    return 0;
  }
  if (mode == "exit" && argc == 4) {
    if (rank == std::atoi(argv[2])) return std::atoi(argv[3]);
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  if (mode == "stall" && argc == 3) {
    vescale::dist::init({.device = "cpu"});
    if (rank == std::atoi(argv[2])) {
      std::this_thread::sleep_for(std::chrono::seconds(120));
      return 0;
    }
    try {
      auto t = at::ones({4});
      vescale::dist::world().all_reduce(t).wait();
    } catch (const vescale::TimeoutError& e) {
      std::fprintf(stderr, "TimeoutError: %s\n", e.what());
      std::fflush(stderr);
      std::_Exit(1);  // the world is broken; don't wait on it in destructors
    }
    return 0;
  }
  if (mode == "wait") {
    std::printf("ready\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  std::fprintf(stderr, "usage: fault_rank echo | exit R C | stall R | wait\n");
  return 2;
}
