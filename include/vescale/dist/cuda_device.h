// The few CUDA runtime calls the launch path needs, compiled by nvcc when present.
#pragma once

namespace vescale::dist {

// Number of visible CUDA devices; 0 when there is no driver, no device, or no CUDA build.
int cuda_device_count();
// Makes `device` current for this process; throws with the reason if it can't.
void cuda_set_device(int device);

}  // namespace vescale::dist
