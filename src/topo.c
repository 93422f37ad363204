/*
** topo.c — cluster topologies: enough structure to map every transfer onto the
** links it occupies (the communication class of a task). Bandwidths and
** latencies are recorded for the timing model; their sources are in
** lua/resccl/topo.lua.
**
** Link ids: intra-node links first, node n pair (i, j) = n*gpn*gpn + i*gpn + j;
** then per NIC a transmit and a receive link.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define MAX_NODES 128
#define MAX_GPN 1024

static Topo *topo_make(const char *spec, const char *model, int nnodes, int gpn) {
  Topo *t = xcalloc(1, sizeof *t);
  snprintf(t->spec, sizeof t->spec, "%s", spec);
  snprintf(t->model, sizeof t->model, "%s", model);
  t->nnodes = nnodes;
  t->gpn = gpn;
  t->nranks = nnodes * gpn;
  t->gpus_per_nic = 2;
  /* A100 (paper Table 2): NVSwitch 300 GB/s per GPU per direction, 200 Gb/s RoCE NICs. */
  t->intra_gbps = 300, t->intra_lat_us = 2;
  t->nic_gbps = 25, t->nic_lat_us = 5;
  if (strcmp(model, "h200") == 0) t->intra_gbps = 390, t->intra_lat_us = 2; /* NV18, measured */
  int nics = nnodes > 1 ? nnodes * ((gpn + t->gpus_per_nic - 1) / t->gpus_per_nic) : 0;
  t->nlinks = nnodes * gpn * gpn + 2 * nics;
  return t;
}

Topo *topo_flat(int nranks) {
  char spec[32];
  snprintf(spec, sizeof spec, "nvswitch:%d", nranks);
  return topo_make(spec, "nvswitch", 1, nranks);
}

static int parse_int(const char **s, int *v) {
  char *end;
  long x = strtol(*s, &end, 10);
  if (end == *s || x < 1 || x > 1 << 20) return 0;
  *v = (int)x;
  *s = end;
  return 1;
}

Topo *topo_parse(const char *spec, Err *e) {
  const char *colon = strchr(spec, ':');
  int n = 1, g = 0;
  if (!colon || colon - spec >= 16) goto bad;
  char model[16];
  memcpy(model, spec, (size_t)(colon - spec));
  model[colon - spec] = '\0';
  const char *s = colon + 1;
  if (strcmp(model, "a100") == 0) {
    if (!parse_int(&s, &n) || *s++ != 'x' || !parse_int(&s, &g) || *s) goto bad;
  } else if (strcmp(model, "nvswitch") == 0 || strcmp(model, "h200") == 0) {
    if (!parse_int(&s, &g) || *s) goto bad;
    if (strcmp(model, "h200") == 0 && g != 2)
      return err_set(e, RC_ETOPO, "topology '%s': h200 has 2 GPUs (h200:2)", spec), NULL;
  } else {
    err_set(e, RC_ETOPO, "topology '%s': unknown model '%s' (known: a100:NxG, nvswitch:G, h200:2)", spec, model);
    return NULL;
  }
  if (n > MAX_NODES || g > MAX_GPN || n * g > MAX_GPN)
    return err_set(e, RC_ETOPO, "topology '%s': at most %d nodes and %d GPUs", spec, MAX_NODES, MAX_GPN), NULL;
  if (n * g < 1) goto bad;
  return topo_make(spec, model, n, g);
bad:
  err_set(e, RC_ETOPO, "topology '%s': expected a100:NxG, nvswitch:G or h200:2", spec);
  return NULL;
}

void topo_free(Topo *t) { free(t); }

static int nic_of(const Topo *t, int rank) {
  int per_node = (t->gpn + t->gpus_per_nic - 1) / t->gpus_per_nic;
  return (rank / t->gpn) * per_node + (rank % t->gpn) / t->gpus_per_nic;
}

int topo_route(const Topo *t, int s, int d, int out[TOPO_MAXHOP]) {
  if (s == d) return 0;
  int g = t->gpn, base = t->nnodes * g * g;
  if (s / g == d / g) {
    out[0] = (s / g) * g * g + (s % g) * g + d % g;
    return 1;
  }
  out[0] = base + 2 * nic_of(t, s);     /* sender's NIC, transmit */
  out[1] = base + 2 * nic_of(t, d) + 1; /* receiver's NIC, receive */
  return 2;
}

void topo_link(const Topo *t, int id, Link *l) {
  int g = t->gpn, base = t->nnodes * g * g;
  memset(l, 0, sizeof *l);
  if (id < base) {
    int n = id / (g * g), i = id / g % g, j = id % g;
    l->kind = g == 2 && strcmp(t->model, "nvswitch") != 0 ? LK_NVLINK : LK_NVSWITCH;
    l->gbps = t->intra_gbps;
    l->lat_us = t->intra_lat_us;
    snprintf(l->name, sizeof l->name, "nvl:%d->%d", n * g + i, n * g + j);
  } else {
    int nic = (id - base) / 2, rx = (id - base) % 2;
    l->kind = rx ? LK_NIC_RX : LK_NIC_TX;
    l->gbps = t->nic_gbps;
    l->lat_us = t->nic_lat_us;
    snprintf(l->name, sizeof l->name, "nic%d.%s", nic, rx ? "rx" : "tx");
  }
}
