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

std::string cuda_device_name() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return prop.name;
}

long long cuda_memory_used() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<long long>(total - free);
}

long long cuda_memory_total() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<long long>(total);
}

}  // namespace vescale::dist
