// An error in the run's input: running the same command again fails the same way.
#pragma once
#include "vescale/common/check.h"

namespace vescale {

// The run's input (its config, plan, flags, or the world it was given) cannot work, so a
// launcher that restarts failed ranks must not restart this one (vescale-train exits 2).
class InputError : public Error {
 public:
  using Error::Error;
};

}  // namespace vescale
