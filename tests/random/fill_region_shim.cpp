// Lets the unit tests call the internal region kernel (src/random/kernels.h) directly.
#include "random/kernels.h"

void vescale_test_fill_region(at::Tensor& out, const std::vector<int64_t>& global,
                              const std::vector<int64_t>& offset, uint64_t seed, uint64_t base,
                              const vescale::random::DistParams& p) {
  vescale::random::fill_region(out, global, offset, seed, base, p);
}
