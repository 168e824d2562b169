// Built when nvcc is absent.
#include "random/kernels.h"
#include "vescale/common/check.h"

namespace vescale::random {

void fill_region_cuda(at::Tensor&, const std::vector<int64_t>&, const std::vector<int64_t>&,
                      uint64_t, uint64_t, const DistParams&) {
  VESCALE_FAIL("random: this build has no CUDA kernels (nvcc was not found at configure time)");
}

}  // namespace vescale::random
