// Uses the installed headers and library: one process, a 1-D mesh, one all_reduce.
#include <ATen/ops/full.h>
#include <vescale/vescale.h>

#include <cstdio>

int main() {
  vescale::dist::init({.device = "cpu"});
  auto mesh = vescale::DeviceMesh::init({{"dp", -1}});
  at::Tensor t = at::full({3}, 2.0f);
  mesh.group("dp").all_reduce(t).wait();
  bool ok = t.sum().item<float>() == 6.0f && mesh.size() == 1;
  std::printf("consumer: %s, sum %.1f\n", mesh.to_string().c_str(), t.sum().item<float>());
  vescale::dist::shutdown();
  return ok ? 0 : 1;
}
