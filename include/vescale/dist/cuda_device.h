// The few CUDA runtime calls the launch path needs, compiled by nvcc when present.
#pragma once
#include <string>

namespace vescale::dist {

// Number of visible CUDA devices; 0 when there is no driver, no device, or no CUDA build.
int cuda_device_count();
// Makes `device` current for this process; throws with the reason if it can't.
void cuda_set_device(int device);
// The current device's product name ("NVIDIA H100 80GB HBM3"); empty when it can't be read.
std::string cuda_device_name();
// Bytes of the current device's memory in use (total - free, every process's); 0 without CUDA.
long long cuda_memory_used();
// Bytes of the current device's memory in all; 0 without CUDA.
long long cuda_memory_total();

}  // namespace vescale::dist
