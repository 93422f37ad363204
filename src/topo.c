/*
** topo.c — cluster topologies: enough structure to map every transfer onto the
** links it occupies, plus the numbers the timing simulator (sim.c) needs.
** The presets' numbers and their sources are documented in
** lua/resccl/topo.lua; a custom topology fills a Topo and calls topo_new.
**
** Two views of a route. topo_route gives the *logical* links, the scheduler's
** communication classes: inside a node one per ordered GPU pair, across nodes
** the sender's NIC (transmit) and the receiver's NIC (receive). topo_path
** gives the *physical* resources the simulator charges: on an NVSwitch node a
** GPU's switch port (transmit, receive) is shared by all of its peers, so a
** transfer there occupies the sender's tx port and the receiver's rx port;
** a direct NVLink bundle and a NIC are physical already.
**
** Link ids: intra-node pair links first, node n pair (i, j) = n*gpn*gpn +
** i*gpn + j; then per NIC a transmit and a receive link; then per GPU a
** transmit and a receive switch port. Ids are computed, not stored, so 1024
** ranks cost nothing.
*/
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define MAX_NODES 128
#define MAX_GPN 1024

/*
** Preset parameters, one row per model (sources: lua/resccl/topo.lua).
** Bandwidths are what SM-driven transfers reach, GB/s per direction.
*/
typedef struct {
  const char *model;
  int gpn;             /* fixed GPUs per node, 0 = from the spec */
  int switched, gpus_per_nic;
  double intra_gbps, intra_lat_us, nic_gbps, nic_lat_us;
  double alpha_us, tb_gbps, tb_reduce_gbps;
  double intra_sat, nic_sat, intra_gamma, nic_gamma;
  double ce_gbps, ce_local_gbps, ce_lat_us, ce_sync_us, read_gbps, tb_read_gbps, pull_sync_us;
} Preset;

static const Preset presets[] = {
    /* model      gpn sw nic  intra lat   nic   lat  alpha  tb   tbred isat nsat igam ngam
                  ce   celocal celat cesync read tbread pullsync */
    {"a100",       0, 1, 2,   240, 0.7,  22.5, 2.5,  1.0,  33,  17,   0,   2,  0.1, 0.3,
                  265, 900,    1.5,  12,    220,  28,    2.6},
    {"nvswitch",   0, 1, 2,   240, 0.7,  22.5, 2.5,  1.0,  33,  17,   0,   2,  0.1, 0.3,
                  265, 900,    1.5,  12,    220,  28,    2.6},
    {"ndv4",       8, 1, 1,   240, 0.7,  22.5, 2.5,  1.0,  33,  17,   0,   2,  0.1, 0.3,
                  265, 900,    1.5,  12,    220,  28,    2.6},
    {"dgx_h100",   8, 1, 1,   370, 0.7,  45,   2.5,  1.0,  46,  24,   8,   4,  0.1, 0.3,
                  392, 1450,   1.5,  12,    337,  39,    2.6},
    {"h200",       2, 0, 1,   370, 0.7,  0,    0,    1.0,  46,  24,   8,   0,  0.1, 0,
                  392, 2100,   1.5,  12,    337,  39,    2.6},
};

static const char *const KNOWN = "a100:NxG, nvswitch:G, h200:2, dgx_h100:N or ndv4:N";

const char *topo_presets(void) { return KNOWN; }

/* The numbers of a topology, each finite and >= 0. */
#define FIELD(f) {#f, offsetof(Topo, f)},
static const struct {
  const char *name;
  size_t off;
} NUMBERS[] = {TOPO_FIELDS(FIELD)};
#undef FIELD

/* Check every number, then that every pair of ranks can reach the other; count links. */
Topo *topo_new(const Topo *desc, Err *e) {
  const Topo *d = desc;
  if (d->nnodes < 1 || d->gpn < 1)
    return err_set(e, RC_ETOPO, "topology '%s': needs at least one node and one GPU per node", d->spec), NULL;
  if (d->nnodes > MAX_NODES || d->gpn > MAX_GPN || d->nnodes * d->gpn > MAX_GPN)
    return err_set(e, RC_ETOPO, "topology '%s': at most %d nodes and %d GPUs", d->spec, MAX_NODES, MAX_GPN), NULL;
  for (size_t i = 0; i < sizeof NUMBERS / sizeof *NUMBERS; i++) {
    double v = *(const double *)((const char *)d + NUMBERS[i].off);
    if (!(isfinite(v) && v >= 0))
      return err_set(e, RC_ETOPO, "topology '%s': %s must be a finite number >= 0, got %g", d->spec, NUMBERS[i].name,
                     v), NULL;
  }
  if (d->gpn > 1 && !(d->intra_gbps > 0))
    return err_set(e, RC_ETOPO, "topology '%s': ranks 0 and 1 cannot reach each other (no intra-node bandwidth)",
                   d->spec), NULL;
  if (d->nnodes > 1 && !(d->nic_gbps > 0 && d->gpus_per_nic >= 1))
    return err_set(e, RC_ETOPO, "topology '%s': ranks 0 and %d cannot reach each other (no NIC between nodes)",
                   d->spec, d->gpn), NULL;
  Topo *t = xmalloc(sizeof *t);
  *t = *d;
  t->nranks = t->nnodes * t->gpn;
  if (t->gpus_per_nic < 1) t->gpus_per_nic = 1;
  int nics = t->nnodes > 1 ? t->nnodes * ((t->gpn + t->gpus_per_nic - 1) / t->gpus_per_nic) : 0;
  t->nlinks = t->nnodes * t->gpn * t->gpn + 2 * nics + (t->switched ? 2 * t->nranks : 0);
  return t;
}

static Topo *topo_preset(const char *spec, const Preset *p, int nnodes, int gpn, Err *e) {
  Topo d = {0};
  snprintf(d.spec, sizeof d.spec, "%s", spec);
  snprintf(d.model, sizeof d.model, "%s", p->model);
  d.nnodes = nnodes, d.gpn = gpn, d.switched = p->switched, d.gpus_per_nic = p->gpus_per_nic;
  d.intra_gbps = p->intra_gbps, d.intra_lat_us = p->intra_lat_us;
  d.nic_gbps = p->nic_gbps, d.nic_lat_us = p->nic_lat_us;
  d.alpha_us = p->alpha_us, d.tb_gbps = p->tb_gbps, d.tb_reduce_gbps = p->tb_reduce_gbps;
  d.intra_sat = p->intra_sat, d.nic_sat = p->nic_sat, d.intra_gamma = p->intra_gamma, d.nic_gamma = p->nic_gamma;
  d.ce_gbps = p->ce_gbps, d.ce_local_gbps = p->ce_local_gbps, d.ce_lat_us = p->ce_lat_us, d.ce_sync_us = p->ce_sync_us;
  d.read_gbps = p->read_gbps, d.tb_read_gbps = p->tb_read_gbps, d.pull_sync_us = p->pull_sync_us;
  return topo_new(&d, e);
}

Topo *topo_flat(int nranks) {
  char spec[32];
  Err e;
  snprintf(spec, sizeof spec, "nvswitch:%d", nranks);
  return topo_preset(spec, &presets[1], 1, nranks, &e);
}

static int parse_int(const char **s, int *v) {
  char *end;
  long x = strtol(*s, &end, 10);
  if (end == *s || x < 1 || x > 1 << 20) return 0;
  *v = (int)x;
  *s = end;
  return 1;
}

/*
** "model:NxG" for a100; "model:G" for nvswitch (one node); "model:N" (nodes)
** for the models with a fixed node size; h200 only as h200:2.
*/
Topo *topo_parse(const char *spec, Err *e) {
  const char *colon = strchr(spec, ':');
  const Preset *p = NULL;
  int n = 1, g = 0;
  if (!colon || colon - spec >= 16) goto bad;
  for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
    if (strlen(presets[i].model) == (size_t)(colon - spec) && strncmp(spec, presets[i].model, (size_t)(colon - spec)) == 0)
      p = &presets[i];
  if (!p) {
    err_set(e, RC_ETOPO, "topology '%s': unknown model '%.*s' (known: %s)", spec, (int)(colon - spec), spec, KNOWN);
    return NULL;
  }
  const char *s = colon + 1;
  if (strcmp(p->model, "a100") == 0) {
    if (!parse_int(&s, &n) || *s++ != 'x' || !parse_int(&s, &g) || *s) goto bad;
  } else if (strcmp(p->model, "nvswitch") == 0) {
    if (!parse_int(&s, &g) || *s) goto bad;
  } else if (strcmp(p->model, "h200") == 0) {
    if (!parse_int(&s, &g) || *s) goto bad;
    if (g != 2) return err_set(e, RC_ETOPO, "topology '%s': h200 has 2 GPUs (h200:2)", spec), NULL;
  } else {
    if (!parse_int(&s, &n) || *s) goto bad;
    g = p->gpn;
  }
  return topo_preset(spec, p, n, g, e);
bad:
  err_set(e, RC_ETOPO, "topology '%s': expected %s", spec, KNOWN);
  return NULL;
}

void topo_free(Topo *t) { free(t); }

static int nic_of(const Topo *t, int rank) {
  int per_node = (t->gpn + t->gpus_per_nic - 1) / t->gpus_per_nic;
  return (rank / t->gpn) * per_node + (rank % t->gpn) / t->gpus_per_nic;
}

static int nic_base(const Topo *t) { return t->nnodes * t->gpn * t->gpn; }

static int port_base(const Topo *t) {
  int nics = t->nnodes > 1 ? t->nnodes * ((t->gpn + t->gpus_per_nic - 1) / t->gpus_per_nic) : 0;
  return nic_base(t) + 2 * nics;
}

int topo_route(const Topo *t, int s, int d, int out[TOPO_MAXHOP]) {
  if (s == d) return 0;
  int g = t->gpn, base = nic_base(t);
  if (s / g == d / g) {
    out[0] = (s / g) * g * g + (s % g) * g + d % g;
    return 1;
  }
  out[0] = base + 2 * nic_of(t, s);     /* sender's NIC, transmit */
  out[1] = base + 2 * nic_of(t, d) + 1; /* receiver's NIC, receive */
  return 2;
}

int topo_path(const Topo *t, int s, int d, int out[TOPO_MAXHOP]) {
  int n = topo_route(t, s, d, out);
  if (n == 1 && t->switched) {
    out[0] = port_base(t) + 2 * s;     /* sender's switch port, transmit */
    out[1] = port_base(t) + 2 * d + 1; /* receiver's switch port, receive */
    n = 2;
  }
  return n;
}

void topo_link(const Topo *t, int id, Link *l) {
  int g = t->gpn, base = nic_base(t), ports = port_base(t);
  memset(l, 0, sizeof *l);
  if (id < base) {
    int n = id / (g * g), i = id / g % g, j = id % g;
    l->kind = t->switched ? LK_NVSWITCH : LK_NVLINK;
    l->gbps = t->intra_gbps, l->lat_us = t->intra_lat_us;
    l->sat = t->intra_sat, l->gamma = t->intra_gamma;
    snprintf(l->name, sizeof l->name, "nvl:%d->%d", n * g + i, n * g + j);
  } else if (id < ports) {
    int nic = (id - base) / 2, rx = (id - base) % 2;
    l->kind = rx ? LK_NIC_RX : LK_NIC_TX;
    l->gbps = t->nic_gbps, l->lat_us = t->nic_lat_us;
    l->sat = t->nic_sat, l->gamma = t->nic_gamma;
    snprintf(l->name, sizeof l->name, "nic%d.%s", nic, rx ? "rx" : "tx");
  } else {
    int gpu = (id - ports) / 2, rx = (id - ports) % 2;
    l->kind = rx ? LK_PORT_RX : LK_PORT_TX;
    l->gbps = t->intra_gbps, l->lat_us = t->intra_lat_us;
    l->sat = t->intra_sat, l->gamma = t->intra_gamma;
    snprintf(l->name, sizeof l->name, "gpu%d.%s", gpu, rx ? "rx" : "tx");
  }
}
