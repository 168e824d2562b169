// Logging: spdlog with a rank prefix. By default only rank 0 logs at info; the others log
// warnings and errors. VESCALE_LOG_LEVEL (trace|debug|info|warn|error|off) or a flag
// overrides the level on every rank.
#pragma once
#include <string>

namespace vescale::log {

// Sets up the default logger for this process. `level` empty means: take VESCALE_LOG_LEVEL,
// else info on rank 0 and warn elsewhere. Unknown level names throw.
void init(int rank, const std::string& level = "");

// Whether init() has run. Until it does, logging goes through rank 0's format and level (as
// init(0) gives); dist::init() calls init(rank) when nobody has, so an embedding program logs
// exactly as the apps do.
bool initialized();

// The level name in effect ("info", "warn", ...).
std::string level();

// Plain-string entry points for code that does not include spdlog (apps, consumers).
void info(const std::string& msg);
void warn(const std::string& msg);
void error(const std::string& msg);
void debug(const std::string& msg);

}  // namespace vescale::log
