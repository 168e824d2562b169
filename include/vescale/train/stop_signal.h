// A graceful stop on SIGTERM / SIGINT, as Slurm and Kubernetes send before a kill: the first
// signal asks Trainer::run() to finish the current step, save a checkpoint and return; the
// second ends the process at once (by the same signal). Every rank agrees on the step to stop
// after, so a signal that reached one rank stops them all.
#pragma once

namespace vescale::train {

// Process-wide: replaces this process's SIGTERM and SIGINT handlers (vescale-train calls it
// before building its Trainer; an embedder may instead call request_stop from its own handler).
void install_stop_handlers();
// As if `signal` had arrived once: run() stops after the current step.
void request_stop(int signal);
// The signal a stop was asked with (SIGTERM or SIGINT), 0 when none. Local to this rank.
int stop_requested();

}  // namespace vescale::train
