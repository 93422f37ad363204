/*
** cudart_probe.c — a library that calls into cudart and NVRTC, linked as
** libresccl links them (tests/CMakeLists.txt's no_driver reads its NEEDED).
*/
#include <cuda_runtime_api.h>
#include <nvrtc.h>

int cudart_probe(void) {
  int rt = 0, major = 0, minor = 0;
  cudaRuntimeGetVersion(&rt);
  nvrtcVersion(&major, &minor);
  return rt + major + minor;
}
