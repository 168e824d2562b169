// Built when nvcc is absent: no CUDA devices.
#include "vescale/common/check.h"
#include "vescale/dist/cuda_device.h"

namespace vescale::dist {

int cuda_device_count() { return 0; }

void cuda_set_device(int device) {
  VESCALE_FAIL(
      "cuda: this build has no CUDA support (nvcc was not found at configure time); cannot use "
      "device ",
      device);
}

std::string cuda_device_name() { return ""; }

long long cuda_memory_used() { return 0; }

long long cuda_memory_total() { return 0; }

}  // namespace vescale::dist
