/*
** driver.c — the CUDA driver API, reached through the CUDA runtime (cudart
** is linked statically and loads the driver itself), so that libresccl
** loads on a machine without a GPU driver and says so instead of failing
** to link.
*/
#include "objects.h"

RtDriver drv;

resccl_result_t drv_open(void) {
  if (drv.launch) return resccl_success;
  static const char *const names[] = {"cuModuleLoadData", "cuModuleUnload", "cuModuleGetFunction", "cuLaunchKernel",
                                      "cuOccupancyMaxActiveBlocksPerMultiprocessor", "cuGetErrorString",
                                      "cuStreamWriteValue32", "cuStreamWaitValue32", "cuMemcpyAsync"};
  void **slots[] = {(void **)&drv.load,      (void **)&drv.unload,       (void **)&drv.function,
                    (void **)&drv.launch,    (void **)&drv.occupancy,    (void **)&drv.error_string,
                    (void **)&drv.write_value, (void **)&drv.wait_value, (void **)&drv.copy};
  for (int i = 0; i < (int)(sizeof names / sizeof *names); i++) {
    enum cudaDriverEntryPointQueryResult q;
    void *fn = NULL;
    if (cudaGetDriverEntryPointByVersion(names[i], &fn, 12000, cudaEnableDefault, &q) != cudaSuccess || !fn) {
      drv.launch = NULL;
      return rt_fail(resccl_unhandled_cuda_error, "the CUDA driver has no %s", names[i]);
    }
    *slots[i] = fn;
  }
  return resccl_success;
}
