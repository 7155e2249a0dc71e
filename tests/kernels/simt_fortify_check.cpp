// The SIMT emulator built with glibc's _FORTIFY_SOURCE=2, as Ubuntu's gcc builds by default: its
// fiber switches jump to heap stacks, which the fortified longjmp would refuse (abort). A block
// reduction across two blocks of 64 threads must run and give 64.
#include <cstdio>

#include "kernels/common/reduce.cuh"

namespace {

KVS_GLOBAL void sum_kernel(float* out) {
  KVS_SHARED_ARRAY(float, slots, 32);
  const float v = kvscope::kernels::block_sum(1.0f, slots);
  if (kvscope::simt::tid_x() == 0) out[kvscope::simt::bid_x()] = v;
}

}  // namespace

int main() {
  float out[2] = {0.0f, 0.0f};
  float* p = out;
  KVS_LAUNCH(sum_kernel, kvscope::sim::dim3(2), kvscope::sim::dim3(64), 0, p);
  std::printf("block sums %g %g\n", out[0], out[1]);
  return out[0] == 64.0f && out[1] == 64.0f ? 0 : 1;
}
