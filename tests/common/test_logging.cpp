#include <catch2/catch.hpp>

#include <cstdlib>

#include "vescale/common/check.h"
#include "vescale/common/error_text.h"
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

TEST_CASE("errors show their source location only when asked for", "[log]") {
  try {
    VESCALE_FAIL("outer: ", "inner thing is wrong");
  } catch (const vescale::Error& e) {
    const std::string full = e.what();
    CHECK_THAT(full, Catch::Matchers::Contains("test_logging.cpp:"));
    CHECK(vescale::error_text(e) == "outer: inner thing is wrong");
    CHECK(vescale::error_text(e, /*with_stack=*/true) == full);
    // Wrapped errors carry one location per level: every one goes.
    const vescale::Error wrapped("step 3: forward: " + full + "; and more  [/x/y.h:12]");
    CHECK(vescale::error_text(wrapped) == "step 3: forward: outer: inner thing is wrong; and more");
  }
  // Brackets that are not locations stay.
  const vescale::Error plain("mesh  [dp, tp] and  [a:b]");
  CHECK(vescale::error_text(plain) == "mesh  [dp, tp] and  [a:b]");
}
