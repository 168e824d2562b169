// Internal: the rendezvous key-value store every group is built on.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <optional>
#include <string>

#include "vescale/dist/launch_env.h"

namespace vescale::dist {

// Rank 0 serves a c10d TCPStore at MASTER_ADDR:MASTER_PORT; the others connect to it. Under
// torchrun's agent (LaunchEnv::agent_store) the agent serves it and every rank connects.
// A single process gets an in-memory store and opens no port.
c10::intrusive_ptr<c10d::Store> make_store(const LaunchEnv& env, std::chrono::milliseconds timeout);

// The store seen through "prefix/", so that groups don't read each other's keys.
c10::intrusive_ptr<c10d::Store> prefixed(const std::string& prefix,
                                         const c10::intrusive_ptr<c10d::Store>& store);

// A TCPStore serving on `listen_fd` (a socket bound and listening at host:port), or a client of
// one at host:port that waits up to `timeout` to connect. c10d's errors pass through.
c10::intrusive_ptr<c10d::TCPStore> serve_tcp_store(const std::string& host, int port, int listen_fd,
                                                   std::chrono::milliseconds timeout);
c10::intrusive_ptr<c10d::TCPStore> join_tcp_store(const std::string& host, int port,
                                                  std::chrono::milliseconds timeout);

// Text values (counters, addresses, JSON) on a store.
std::string get_text(c10d::Store& store, const std::string& key);
void set_text(c10d::Store& store, const std::string& key, const std::string& value);

// Round k's keys on an agent's store (LaunchEnv::round): every rank's store is prefixed by it.
std::string attempt_prefix(int round);
// Where rank 0 reports `what` ("step", "checkpoint") under its round's prefix (dist/progress.h);
// the agent reads attempt_prefix(k) + "/" + progress_key(what).
std::string progress_key(const std::string& what);

}  // namespace vescale::dist
