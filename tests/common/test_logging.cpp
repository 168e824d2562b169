#include <catch2/catch.hpp>

#include <cstdlib>

#include "vescale/common/check.h"
#include "vescale/common/logging.h"

TEST_CASE("rank 0 logs info, other ranks only warnings", "[log]") {
  ::unsetenv("VESCALE_LOG_LEVEL");
  vescale::log::init(0);
  CHECK(vescale::log::level() == "info");
  vescale::log::init(3);
  CHECK(vescale::log::level() == "warning");
}

TEST_CASE("the log level comes from the flag, then the env", "[log]") {
  ::setenv("VESCALE_LOG_LEVEL", "debug", 1);
  vescale::log::init(2);
  CHECK(vescale::log::level() == "debug");
  vescale::log::init(2, "error");
  CHECK(vescale::log::level() == "error");
  ::setenv("VESCALE_LOG_LEVEL", "loud", 1);
  CHECK_THROWS_WITH(vescale::log::init(0),
                    Catch::Matchers::Contains("VESCALE_LOG_LEVEL: unknown log level 'loud'"));
  ::unsetenv("VESCALE_LOG_LEVEL");
  CHECK_THROWS_WITH(vescale::log::init(0, "verbose"),
                    Catch::Matchers::Contains("--log-level: unknown log level"));
}
