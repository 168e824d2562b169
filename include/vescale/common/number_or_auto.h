// A config value that is a number or the string "auto" (worked out at run time), such as
// train.peak_flops.
#pragma once

namespace vescale {

struct NumberOrAuto {
  bool is_auto = true;
  double value = 0;  // when !is_auto
};

}  // namespace vescale
