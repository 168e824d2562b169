#include "vescale/common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

#include "vescale/common/check.h"

namespace vescale::log {

namespace {

bool g_initialized = false;  // init() ran: by an app, or by dist::init for an embedder
bool g_default = false;      // ensure() set rank 0's logger up; init() still may

spdlog::level::level_enum parse_level(const std::string& name, const char* source) {
  auto lvl = spdlog::level::from_str(name);
  // from_str maps unknown names to off; only accept "off" when it was asked for.
  VESCALE_CHECK(lvl != spdlog::level::off || name == "off", source, ": unknown log level '", name,
                "'; use one of trace, debug, info, warn, error, off");
  return lvl;
}

void setup(int rank, const std::string& level) {
  spdlog::level::level_enum lvl = rank == 0 ? spdlog::level::info : spdlog::level::warn;
  if (!level.empty()) {
    lvl = parse_level(level, "--log-level");
  } else if (const char* env = std::getenv("VESCALE_LOG_LEVEL"); env && *env) {
    lvl = parse_level(env, "VESCALE_LOG_LEVEL");
  }
  const std::string name = "vescale." + std::to_string(rank);
  spdlog::drop(name);  // init may run again (tests, re-init after shutdown)
  auto logger = spdlog::stderr_color_mt(name);
  // Under vescale-run every line already carries "[rank k]"; don't say it twice.
  const char* prefixed = std::getenv("VESCALE_RANK_PREFIXED");
  const std::string who =
      (prefixed && std::string(prefixed) == "1") ? "" : "[rank " + std::to_string(rank) + "] ";
  logger->set_pattern(who + "%H:%M:%S.%e %^%l%$ %v");
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

// Before any init (a library call logging first): rank 0's format and level, as the apps'.
void ensure() {
  if (!g_initialized && !g_default) setup(0, ""), g_default = true;
}

}  // namespace

void init(int rank, const std::string& level) {
  setup(rank, level);
  g_initialized = true;
}

bool initialized() { return g_initialized; }

std::string level() {
  ensure();
  auto sv = spdlog::level::to_string_view(spdlog::default_logger()->level());
  return std::string(sv.data(), sv.size());
}

void info(const std::string& msg) { ensure(), spdlog::info(msg); }
void warn(const std::string& msg) { ensure(), spdlog::warn(msg); }
void error(const std::string& msg) { ensure(), spdlog::error(msg); }
void debug(const std::string& msg) { ensure(), spdlog::debug(msg); }

}  // namespace vescale::log
