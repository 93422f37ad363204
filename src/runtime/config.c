/*
** config.c — the knobs a plan is loaded with (RtConf): read from the
** environment through src/setting.c's reader, with their defaults, and
** checked wherever they came from; and the dtypes' sizes and names.
*/
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "../dtypes.h"
#include "../setting.h"
#include "../../kernels-templates/tile.h"

/* RtConf's settings, each a variable of a kind and range (setting.h):
   resccl_x_conf_env reads them, and rt_plan_load checks every RtConf against them
   wherever its values came from (job.c's, from resccl run's arguments). */
enum { NCHANNELS, SLICES, THREADS, SLOTS, SLOT_BYTES, TILE_BYTES, NMICRO, DIRECT, TIMEOUT, CE_FROM, PULL_FROM,
       PULL_BELOW, NVARS };
static const struct {
  const char *name;
  Setting s;
} vars[NVARS] = {
    [NCHANNELS] = {"RESCCL_NCHANNELS", {SET_INT, 0, 64}},
    [SLICES] = {"RESCCL_SLICES", {SET_INT, 0, 16}},
    [THREADS] = {"RESCCL_THREADS", {SET_INT, 0, 1024, 0, 32}},
    [SLOTS] = {"RESCCL_SLOTS", {SET_INT, 1, INT_MAX}},
    [SLOT_BYTES] = {"RESCCL_SLOT_BYTES", {SET_SIZE, 4096, 1 << 30, 0, 16}},
    [TILE_BYTES] = {"RESCCL_TILE_BYTES", {SET_SIZE, 4096, 0x1p40}},
    [NMICRO] = {"RESCCL_NMICRO", {SET_INT, 0, INT_MAX}},
    [DIRECT] = {"RESCCL_DIRECT", {SET_BOOL, 0, 1}},
    [TIMEOUT] = {"RESCCL_TIMEOUT", {SET_DURATION, 0, 1e9}}, /* a bare number counts seconds */
    [CE_FROM] = {"RESCCL_CE_FROM", {SET_SIZE, 0, 0x1p53}},
    [PULL_FROM] = {"RESCCL_PULL_FROM", {SET_SIZE, 0, 0x1p53}},
    [PULL_BELOW] = {"RESCCL_PULL_BELOW", {SET_SIZE, 0, 0x1p53}},
};

/* Variable v into *x where it is set and not empty (else *x stays); refused with its message where it is bad. */
static resccl_result_t env_get(int v, double *x) {
  const char *text = getenv(vars[v].name);
  char err[SETTING_ERR];
  if (text && *text && setting_parse(vars[v].name, text, &vars[v].s, x, err))
    return rt_fail(resccl_invalid_argument, "%s", err);
  return resccl_success;
}

/* Element sizes and names (resccl's CLI's); the kernel's dtype and op codes are the API's (cuda_abi.h). */
#define SIZE(e, name, size) size,
#define NAME(e, name, size) name,
const size_t rt_dtype_size[resccl_num_types] = {RX_DTYPES(SIZE)};
const char *const rt_dtype_name[resccl_num_types] = {RX_DTYPES(NAME)};
#undef SIZE
#undef NAME

/* RESCCL_DTYPES: dtype names separated by commas, as a bit per dtype; 0
   where it names one that is not. */
static unsigned env_dtypes(const char *v) {
  unsigned m = 0;
  for (const char *p = v; *p;) {
    size_t n = strcspn(p, ",");
    int d = 0;
    while (d < resccl_num_types && !(strlen(rt_dtype_name[d]) == n && !strncmp(p, rt_dtype_name[d], n))) d++;
    if (d == resccl_num_types) return 0;
    m |= 1u << d, p += n + (p[n] == ',');
  }
  return m;
}

resccl_result_t resccl_x_conf_env(RtConf *c) {
  /* Large tiles: each handshake (fence, flag, slot) then moves a MiB or more
     per channel; 4 MiB tiles lost 20-35% at 512 MiB on 2xH200 (docs/journal/gpu-2026-11-30.md).
     Copy-engine forms from 64 MiB, and from 16 MiB where they leave no
     block (a two-rank all-gather, an all-to-all): on 2xH200, once their
     calls were queued by events, those moved 1.31-1.54x NCCL's busbw at
     16-32 MiB with no block, launched one by one and in CUDA graphs, and
     less than NCCL's 1.2x below (docs/journal/gpu-2026-12-01.md). RESCCL_CE_FROM sets both.
     On 2xH200 a one-shot all-reduce whose 16 blocks pull moved 3-11% more
     than 32 pushing blocks from 2 to 8 MiB, and a reduce-scatter 1-19% more
     from 4 to 64 MiB and about as much at 128 MiB. Once the end of a pulling
     call cost less, pulls took 10-18% less time than pushes at 1-2 MiB
     (all-reduce), 9% less to 1% more (reduce-scatter) (docs/journal/gpu-2026-12-01.md). */
  double x[NVARS] = {[SLICES] = RX_SLICES, [THREADS] = RT_THREADS, [SLOTS] = 4, [SLOT_BYTES] = RX_SLOT_BYTES,
                     [TILE_BYTES] = RX_TILE_BYTES, [DIRECT] = 1, [TIMEOUT] = 60, [CE_FROM] = -1,
                     [PULL_FROM] = 1 << 20, [PULL_BELOW] = 128 << 20};
  for (int v = 0; v < NVARS; v++) TRY(env_get(v, &x[v]));
  *c = (RtConf){.nchan = (int)x[NCHANNELS], .slices = (int)x[SLICES], .threads = (int)x[THREADS],
                .nslots = (int)x[SLOTS], .slot_bytes = (size_t)x[SLOT_BYTES], .tile_bytes = (size_t)x[TILE_BYTES],
                .nmicro = (int)x[NMICRO], .direct = (int)x[DIRECT], .timeout_s = x[TIMEOUT],
                .ce_from = x[CE_FROM] < 0 ? (size_t)64 << 20 : (size_t)x[CE_FROM],
                .ce_from_blockless = x[CE_FROM] < 0 ? (size_t)16 << 20 : (size_t)x[CE_FROM],
                .pull_from = (size_t)x[PULL_FROM], .pull_below = (size_t)x[PULL_BELOW]};
  c->trace = getenv("RESCCL_TRACE");
  if (c->trace && !*c->trace) c->trace = NULL;
  const char *d = getenv("RESCCL_DTYPES");
  if (d && *d && !(c->dtypes = env_dtypes(d))) {
    char shown[48];
    snprintf(shown, sizeof shown, "%.40s%s", d, strlen(d) > 40 ? "..." : "");
    return rt_fail(resccl_invalid_argument, "RESCCL_DTYPES=%s: not a list of dtypes (i8,u8,i32,u32,i64,u64,f16,f32,"
                   "f64,bf16, separated by commas)", shown);
  }
  return resccl_success;
}

resccl_result_t conf_check(const RtConf *c) {
  const double x[NVARS] = {c->nchan, c->slices, c->threads, c->nslots, (double)c->slot_bytes, (double)c->tile_bytes,
                           c->nmicro, c->direct, c->timeout_s, (double)c->ce_from, (double)c->pull_from,
                           (double)c->pull_below};
  char err[SETTING_ERR];
  for (int v = 0; v < NVARS; v++)
    if (setting_check(vars[v].name, x[v], &vars[v].s, err)) return rt_fail(resccl_invalid_argument, "%s", err);
  return resccl_success;
}
