#include <cuda_runtime.h>

#include <string>

#include "vescale/common/check.h"
#include "vescale/dist/cuda_device.h"

namespace vescale::dist {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

void cuda_set_device(int device) {
  cudaError_t err = cudaSetDevice(device);
  VESCALE_CHECK(err == cudaSuccess, "cuda: cannot use device ", device, " (",
                cudaGetErrorString(err), "); there are ", cuda_device_count(),
                " visible devices. Use fewer ranks per node or set "
                "CUDA_VISIBLE_DEVICES");
}

}  // namespace vescale::dist
