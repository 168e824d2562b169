// Internal: the rendezvous key-value store every group is built on.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

#include "vescale/dist/launch_env.h"

namespace vescale::dist {

// Rank 0 serves a c10d TCPStore at MASTER_ADDR:MASTER_PORT; the others connect to it. Under
// torchrun's agent (LaunchEnv::agent_store) the agent serves it and every rank connects.
// A single process gets an in-memory store and opens no port.
c10::intrusive_ptr<c10d::Store> make_store(const LaunchEnv& env, std::chrono::milliseconds timeout);

// The store seen through "prefix/", so that groups don't read each other's keys.
c10::intrusive_ptr<c10d::Store> prefixed(const std::string& prefix,
                                         const c10::intrusive_ptr<c10d::Store>& store);

}  // namespace vescale::dist
