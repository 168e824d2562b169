#include "vescale/train/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace vescale::train {

namespace {

volatile sig_atomic_t g_stop = 0;

// Only async-signal-safe calls: write, signal, raise.
void on_stop_signal(int sig) {
  if (g_stop != 0) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_stop = sig;
  const char* msg =
      sig == SIGINT
          ? "vescale: SIGINT: stopping after this step (send it again to stop at once)\n"
          : "vescale: SIGTERM: stopping after this step (send it again to stop at once)\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, msg, std::strlen(msg));
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a signal must not fail a read or a socket wait of the step
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

void request_stop(int signal) { g_stop = signal; }

int stop_requested() { return g_stop; }

}  // namespace vescale::train
