/*
** sim.c — discrete-event timing of a compiled plan on its topology.
**
** In: a verified Plan (its per-TB primitive programs, connections, waits,
** execution order) and SimOpts (buffer size, tile size, FIFO depth, instances).
** Out: the collective's time, algbw and busbw, per-TB busy / idle / finish
** times, per-link bytes and activity, and optionally one slice per call.
**
** The model. A primitive call moves one tile: cnt chunks / micro-batches /
** instances. A call starts when its waits are met (another primitive of the
** rank finished the same micro-batch), its input tile has arrived on its
** connection, and its output connection has a free FIFO slot (depth tiles;
** a slot is taken when the send starts and freed when the receive ends, the
** verifier's and the executors' accounting). It then costs the TB:
**   - alpha, the startup of a transfer, for every call that pushes data or
**     works locally (a pure receive only drains what its sender pushed);
**   - pushing calls (send, cs, rcs, rrcs): a flow of the tile's bytes over
**     the route's physical links (topo_path); the tile arrives after the
**     route's latency;
**   - receiving and local calls (recv, rrc, copy, reduce): a local pass over
**     the tile at the TB's rate. A receive that was already waiting when its
**     tile started to flow streams it as it arrives: it ends at the later of
**     the arrival and the flow's start plus its own pass.
** A TB moves at most tb_gbps (tb_reduce_gbps when it reduces). A link's
** bandwidth is shared max-min fairly among its flows, each capped by its TB;
** when z = flows / (TBs that saturate the link) exceeds 1 the link delivers
** bandwidth / (1 + gamma log2 z) in all: the paper's §3 contention penalty
** L(z) for driving one link with more TBs than it needs. A flow runs at the
** smallest of its TB's rate and its links' shares (a one-level max-min).
**
** Copy-engine copies (Plan.ce) run on a stream per (source, destination)
** GPU pair, in the runtime's queue order: those that wait for no counter,
** then the others. A copy moves all its micro-batches at once, or, when it
** waits for a counter (CeCopy.after: its source's writer finished the
** micro-batch on every instance) or posts a flag (a reduction waits for the
** micro-batch to land), one at a time; each piece costs ce_lat_us to start,
** then flows over the route with no TB cap (a local copy: a pass at
** ce_local_gbps). A pull (Prim.pull) is its TB's own flow from the sender's
** GPU, capped at tb_read_gbps, ending when the data has come back.
** A link delivers the least ceiling of the traffic it carries: intra_gbps
** (less the penalty) for TBs' stores, ce_gbps for copies, read_gbps for
** reads. A call with copies pays two barriers (2 ce_sync_us), a pulling one
** its two handshakes (pull_sync_us).
**
** Busy time is alpha plus data movement; idle time is time blocked. A TB
** lives from 0 to the end of its last call; afterwards it is released.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "../kernels-templates/tile.h"

#define FLOW_MAXHOP (2 * TOPO_MAXHOP) /* a pull that puts crosses two routes */

enum { EV_STEP, EV_FLOW, EV_ARRIVE };
enum { TS_BLOCKED, TS_ALPHA, TS_FLOW, TS_LOCAL, TS_DONE };
enum { FK_PUSH, FK_CE, FK_READ, NFK }; /* who drives a flow: a TB's stores, a copy engine, a TB's reads */

typedef struct {
  double t;
  long seq;
  int kind, id;
  unsigned ver;
} Ev;

typedef struct {
  const Plan *pl;
  const Topo *tp;
  SimOpts o;
  int K, M, NP, NT, NC;          /* instances, micro-batches, prims, TBs and connections per instance */
  int NG, NA;                    /* TBs (K*NT); agents: the TBs, then the copy streams */
  double chunk_bytes;            /* one chunk of one instance */
  int *ord, *ntask;              /* per task: index among its connection's tasks; per connection: count */
  int *done;                     /* per prim (K*NP): micro-batches finished */
  int *arrived, *sent, *popped;  /* per connection (K*NC), in tiles */
  int *cewait;                   /* per prim (NP): the flag of the copy it reduces, or -1 */
  int *landed;                   /* per flag: micro-batches its copy has landed */
  int *poster;                   /* per counter: the prim (NP) that posts it */
  int *sq, *sq_off;              /* per copy stream: its copies (Plan.ce) in queue order */
  double *tsent;                 /* per connection and FIFO slot: when the tile in it started to flow */
  /* per agent (NA): a stream's cur indexes its copies */
  int *cur, *mb, *next;
  char *state;
  double *since, *t0, *busy, *idle, *end;
  int *head;                     /* waiters per resource: prim, connection data, connection space */
  /* flows: at most one per agent, indexed by agent */
  double *rem, *rate, *tlast, *cap, *fbytes;
  unsigned *ver;
  char *fkind;                   /* FK_ kind */
  int *path, *npath, *lpos;      /* up to FLOW_MAXHOP links, position in each link's list */
  /* links, by topology id */
  int nl;
  char *lseen;
  double *bw, *lat, *sat, *gamma, *share, *lbytes, *lactive, *lsince;
  int **lflows, *nlf, *caplf;
  int *nkind;                    /* per link and FK_ kind: flows */
  int *stamp, stampv;
  int *dirty, ndirty, capdirty;  /* links whose flows changed at the current time */
  char *isdirty;
  /* events */
  Ev *heap;
  int nheap, capheap;
  long seq, events;
  int *runq, nrun, caprun;
  SimSlice *slice;
  int nslice, capslice;
  int finished;
} Sim;

/* ------------------------------------------------------------------ heap */

static int ev_before(const Ev *a, const Ev *b) { return a->t < b->t || (a->t == b->t && a->seq < b->seq); }

static void ev_push(Sim *s, double t, int kind, int id, unsigned ver) {
  if (s->nheap == s->capheap) {
    s->capheap = s->capheap ? 2 * s->capheap : 1024;
    s->heap = xrealloc(s->heap, (size_t)s->capheap * sizeof *s->heap);
  }
  int i = s->nheap++;
  Ev ev = {t, s->seq++, kind, id, ver};
  while (i > 0 && ev_before(&ev, &s->heap[(i - 1) / 2])) s->heap[i] = s->heap[(i - 1) / 2], i = (i - 1) / 2;
  s->heap[i] = ev;
}

static Ev ev_pop(Sim *s) {
  Ev top = s->heap[0], last = s->heap[--s->nheap];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, m = i;
    const Ev *best = &last;
    if (l < s->nheap && ev_before(&s->heap[l], best)) m = l, best = &s->heap[l];
    if (l + 1 < s->nheap && ev_before(&s->heap[l + 1], best)) m = l + 1;
    if (m == i) break;
    s->heap[i] = s->heap[m], i = m;
  }
  if (s->nheap > 0) s->heap[i] = last;
  return top;
}

/* ----------------------------------------------------------------- links */

#define INF 1e300

static void link_touch(Sim *s, int l) {
  if (s->lseen[l]) return;
  Link k;
  topo_link(s->tp, l, &k);
  s->lseen[l] = 1;
  s->bw[l] = k.gbps * 1e3; /* bytes per us */
  s->lat[l] = k.lat_us;
  s->gamma[l] = k.gamma;
  s->sat[l] = k.sat > 0 ? k.sat : s->tp->tb_gbps > 0 ? k.gbps / s->tp->tb_gbps : 0;
  s->share[l] = INF;
}

static int dbl_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* A link's ceiling for copies or reads: their own rate, or the link's. */
static double ceiling(double gbps, double bw) { return gbps > 0 ? gbps * 1e3 : bw; }

/*
** Water level of link l: every flow capped below it keeps its cap, the rest
** split what is left equally. The total is the least ceiling of the kinds
** of flow on the link; the penalty shrinks the TBs' stores' ceiling first.
*/
static void link_share(Sim *s, int l) {
  int n = s->nlf[l], np = s->nkind[l * NFK + FK_PUSH];
  if (n == 0) {
    s->share[l] = INF;
    return;
  }
  double push = s->bw[l], total = INF;
  if (s->sat[l] > 0 && s->gamma[l] > 0 && np > s->sat[l]) push /= 1 + s->gamma[l] * log2(np / s->sat[l]);
  if (np) total = push;
  if (s->nkind[l * NFK + FK_CE]) total = fmin(total, ceiling(s->tp->ce_gbps, s->bw[l]));
  if (s->nkind[l * NFK + FK_READ]) total = fmin(total, ceiling(s->tp->read_gbps, s->bw[l]));
  double caps[64], *c = n <= 64 ? caps : xmalloc((size_t)n * sizeof *c);
  for (int i = 0; i < n; i++) c[i] = s->cap[s->lflows[l][i]];
  qsort(c, (size_t)n, sizeof *c, dbl_cmp);
  double level = INF;
  for (int i = 0; i < n; i++) {
    if (c[i] * (n - i) <= total) {
      total -= c[i];
      continue;
    }
    level = total / (n - i);
    break;
  }
  if (c != caps) free(c);
  s->share[l] = level;
}

/*
** Settle every flow on the dirty links at its old rate and give it a new one.
** Run once per instant, after every start and end at that instant, so k flows
** starting together on a link cost one pass, not k.
*/
static void reshare(Sim *s, double now) {
  const int *links = s->dirty;
  int nlinks = s->ndirty;
  s->stampv++;
  for (int h = 0; h < nlinks; h++) link_share(s, links[h]);
  for (int h = 0; h < nlinks; h++) {
    int l = links[h];
    for (int i = 0; i < s->nlf[l]; i++) {
      int f = s->lflows[l][i];
      if (s->stamp[f] == s->stampv) continue;
      s->stamp[f] = s->stampv;
      s->rem[f] -= s->rate[f] * (now - s->tlast[f]);
      if (s->rem[f] < 0) s->rem[f] = 0;
      s->tlast[f] = now;
      double r = s->cap[f];
      for (int k = 0; k < s->npath[f]; k++)
        if (s->share[s->path[f * FLOW_MAXHOP + k]] < r) r = s->share[s->path[f * FLOW_MAXHOP + k]];
      if (r == s->rate[f]) continue; /* its completion event still holds */
      s->rate[f] = r;
      s->ver[f]++;
      ev_push(s, r >= INF ? now : now + s->rem[f] / r, EV_FLOW, f, s->ver[f]);
    }
  }
  for (int h = 0; h < nlinks; h++) s->isdirty[links[h]] = 0;
  s->ndirty = 0;
}

static void mark(Sim *s, int l) {
  if (s->isdirty[l]) return;
  s->isdirty[l] = 1;
  VEC_PUSH(s->dirty, s->ndirty, s->capdirty, l);
}

/* Flow f from src to dst, and on to `then` where >= 0 (a pulled reduction
   that puts its result: the read and the put at one pace). */
static void flow_start(Sim *s, int f, int kind, int src, int dst, int then, double bytes, double cap, double now) {
  int *p = s->path + f * FLOW_MAXHOP;
  s->npath[f] = topo_path(s->tp, src, dst, p);
  if (then >= 0) s->npath[f] += topo_path(s->tp, dst, then, p + s->npath[f]);
  s->fkind[f] = (char)kind;
  s->rem[f] = s->fbytes[f] = bytes;
  s->rate[f] = 0;
  s->tlast[f] = now;
  s->cap[f] = cap > 0 ? cap * 1e3 : INF;
  for (int k = 0; k < s->npath[f]; k++) {
    int l = p[k];
    link_touch(s, l);
    if (s->nlf[l] == 0) s->lsince[l] = now;
    s->lpos[f * FLOW_MAXHOP + k] = s->nlf[l];
    VEC_PUSH(s->lflows[l], s->nlf[l], s->caplf[l], f);
    s->nkind[l * NFK + kind]++;
    mark(s, l);
  }
}

/* Take flow f off its links; returns the route's latency. */
static double flow_end(Sim *s, int f, double now) {
  const int *p = s->path + f * FLOW_MAXHOP;
  double lat = 0;
  for (int k = 0; k < s->npath[f]; k++) {
    int l = p[k], i = s->lpos[f * FLOW_MAXHOP + k], g = s->lflows[l][--s->nlf[l]];
    s->lflows[l][i] = g; /* swap the last flow into the hole */
    for (int j = 0; j < s->npath[g]; j++)
      if (s->path[g * FLOW_MAXHOP + j] == l) s->lpos[g * FLOW_MAXHOP + j] = i;
    s->lbytes[l] += s->fbytes[f];
    s->nkind[l * NFK + s->fkind[f]]--;
    if (s->nlf[l] == 0) s->lactive[l] += now - s->lsince[l];
    if (s->lat[l] > lat) lat = s->lat[l];
    mark(s, l);
  }
  s->ver[f]++;
  return lat;
}

/* ----------------------------------------------------------------- TBs */

static const Prim *tb_prim(const Sim *s, int g) {
  int b = g % s->NT;
  return &s->pl->p[s->pl->tb_prims[s->pl->tb_off[b] + s->cur[g]]];
}

static int tb_len(const Sim *s, int g) {
  int b = g % s->NT;
  return s->pl->tb_off[b + 1] - s->pl->tb_off[b];
}

/* Which tile of its connection a task's micro-batch m is. A merged TB's loop
   holds one primitive per connection at most, so task-level a connection
   still carries each task's tiles one after another. */
static int tile_index(const Sim *s, int task, int conn, int m) {
  return s->pl->opt.order == EX_TASK ? s->ord[task] * s->M + m : m * s->ntask[conn] + s->ord[task];
}

static double tile_bytes(const Sim *s, const Prim *p) {
  int t = p->tin >= 0 ? p->tin : p->tout;
  return s->pl->dag.t[t].cnt * s->chunk_bytes / s->M;
}

/* Physical rank of a plan rank in instance k. */
static int rot(const Sim *s, int k, int r) {
  if (!s->o.rotate || k == 0) return r;
  int g = s->tp->gpn;
  return r / g * g + (r % g + k * s->tp->gpus_per_nic) % g;
}

static int is_reduce(int kind) { return kind == PR_RRC || kind == PR_RRCS || kind == PR_RRS || kind == PR_REDUCE; }

static double tb_rate(const Sim *s, const Prim *p) {
  double r = p->pull ? s->tp->tb_read_gbps : is_reduce(p->kind) ? s->tp->tb_reduce_gbps : s->tp->tb_gbps;
  return r * (1 - s->o.slowdown);
}

static void block(Sim *s, int g, int res) {
  s->next[g] = s->head[res];
  s->head[res] = g;
}

static void wake(Sim *s, int res) {
  for (int g = s->head[res]; g >= 0; g = s->next[g]) VEC_PUSH(s->runq, s->nrun, s->caprun, g);
  s->head[res] = -1;
}

/* Resource ids: prim k*NP+p; connection data K*NP + c; connection space K*NP + K*NC + c;
   a copy's flag K*NP + 2*K*NC + f. */
static int flag_res(const Sim *s, int f) { return s->K * s->NP + 2 * s->K * s->NC + f; }

static void tb_data(Sim *s, int g, double now);

static void tb_try(Sim *s, int g, double now) {
  if (s->state[g] != TS_BLOCKED) return;
  if (s->cur[g] >= tb_len(s, g)) return;
  const Plan *pl = s->pl;
  const Prim *p = tb_prim(s, g);
  int k = g / s->NT, m = s->mb[g], f = s->cewait[p - pl->p];
  for (int j = p->wait_off; j < p->wait_off + p->nwaits; j++) {
    int q = k * s->NP + pl->wait[j];
    if (s->done[q] < m + 1) return block(s, g, q);
  }
  if (f >= 0 && s->landed[f] < m + 1) return block(s, g, flag_res(s, f));
  if (p->cin >= 0) {
    int c = k * s->NC + p->cin;
    if (s->arrived[c] <= tile_index(s, p->tin, p->cin, m)) return block(s, g, s->K * s->NP + c);
  }
  if (p->cout >= 0 && !(s->o.gpu && p->direct)) { /* a put (GPU runtime) takes no slot */
    int c = k * s->NC + p->cout;
    if (s->sent[c] - s->popped[c] >= s->o.depth) return block(s, g, s->K * s->NP + s->K * s->NC + c);
  }
  s->idle[g] += now - s->since[g];
  s->t0[g] = now;
  if (p->cin >= 0 && p->cout < 0) return tb_data(s, g, now); /* a pure receive has no startup */
  s->state[g] = TS_ALPHA;
  ev_push(s, now + s->tp->alpha_us, EV_STEP, g, 0);
}

/* After the startup: push the tile, or work on it locally. */
static void tb_data(Sim *s, int g, double now) {
  const Prim *p = tb_prim(s, g);
  int k = g / s->NT;
  double bytes = tile_bytes(s, p), rate = tb_rate(s, p);
  if (p->pull) { /* it reads the sender's buffer over the link itself */
    s->state[g] = TS_FLOW;
    flow_start(s, g, FK_READ, rot(s, k, s->pl->dag.t[p->tin].src), rot(s, k, p->rank),
               p->kind == PR_RRCS ? rot(s, k, s->pl->dag.t[p->tout].dst) : -1, bytes, rate, now);
  } else if (p->cout >= 0) {
    int c = k * s->NC + p->cout;
    s->tsent[(size_t)c * s->o.depth + s->sent[c]++ % s->o.depth] = now;
    const Conn *cn = &s->pl->conn[p->cout];
    s->state[g] = TS_FLOW;
    flow_start(s, g, FK_PUSH, rot(s, k, cn->src), rot(s, k, cn->dst), -1, bytes, rate, now);
  } else {
    double from = now, pass = rate > 0 ? bytes / (rate * 1e3) : 0;
    if (p->cin >= 0 && s->o.gpu && p->direct) { /* a put landed: counted, or reduced where it is */
      if (p->kind == PR_RECV) pass = 0;
    } else if (p->cin >= 0) { /* streamed from when both the tile flowed and the TB waited */
      int c = k * s->NC + p->cin;
      double fs = s->tsent[(size_t)c * s->o.depth + tile_index(s, p->tin, p->cin, s->mb[g]) % s->o.depth];
      from = fs > s->since[g] ? fs : s->since[g];
      s->idle[g] -= now - from;
      s->t0[g] = from;
    }
    s->state[g] = TS_LOCAL;
    ev_push(s, from + pass > now ? from + pass : now, EV_STEP, g, 0);
  }
}

static void next_call(Sim *s, int g, int len, double now);

/* A call finished: free its input slot, count the micro-batch, move on. */
static void tb_finish(Sim *s, int g, double now) {
  const Prim *p = tb_prim(s, g);
  int k = g / s->NT, pi = (int)(p - s->pl->p);
  s->busy[g] += now - s->t0[g];
  if (s->o.trace) {
    SimSlice sl = {g, pi, s->mb[g], s->t0[g], now};
    VEC_PUSH(s->slice, s->nslice, s->capslice, sl);
  }
  if (p->cin >= 0) {
    int c = k * s->NC + p->cin;
    s->popped[c]++;
    wake(s, s->K * s->NP + s->K * s->NC + c);
  }
  s->done[k * s->NP + pi]++;
  wake(s, k * s->NP + pi);
  deadlock_step(s->pl, g % s->NT, s->pl->opt.order, &s->cur[g], &s->mb[g], s->M);
  next_call(s, g, tb_len(s, g), now);
}

/* --------------------------------------------------------- copy streams */

static int cs_len(const Sim *s, int g) { return s->sq_off[g - s->NG + 1] - s->sq_off[g - s->NG]; }

static const CeCopy *cs_copy(const Sim *s, int g) { return &s->pl->ce[s->sq[s->sq_off[g - s->NG] + s->cur[g]]]; }

/* A copy that waits for a counter or posts a flag goes a micro-batch at a time. */
static int cs_each(const CeCopy *c) { return c->flag >= 0 || c->after >= 0; }

static void cs_try(Sim *s, int g, double now) {
  if (s->state[g] != TS_BLOCKED || s->cur[g] >= cs_len(s, g)) return;
  const CeCopy *c = cs_copy(s, g);
  for (int k = 0; c->after >= 0 && k < s->K; k++) { /* its source's writer counted every instance */
    int q = k * s->NP + s->poster[c->after];
    if (s->done[q] < s->mb[g] + 1) return block(s, g, q);
  }
  s->idle[g] += now - s->since[g];
  s->t0[g] = now;
  s->state[g] = TS_ALPHA;
  ev_push(s, now + s->tp->ce_lat_us, EV_STEP, g, 0);
}

/* After the copy's start: its piece flows to the peer, or is copied locally. */
static void cs_data(Sim *s, int g, double now) {
  const CeCopy *c = cs_copy(s, g);
  double bytes = c->cnt * s->chunk_bytes * s->K / (cs_each(c) ? s->M : 1), r = s->tp->ce_local_gbps;
  if (c->src != c->dst) {
    s->state[g] = TS_FLOW;
    flow_start(s, g, FK_CE, c->src, c->dst, -1, bytes, 0, now);
    return;
  }
  s->state[g] = TS_LOCAL;
  ev_push(s, now + (r > 0 ? bytes / (r * 1e3) : 0), EV_STEP, g, 0);
}

/* A piece landed: post its flag, move on. */
static void cs_finish(Sim *s, int g, double now) {
  const CeCopy *c = cs_copy(s, g);
  s->busy[g] += now - s->t0[g];
  if (c->flag >= 0) {
    s->landed[c->flag]++;
    wake(s, flag_res(s, c->flag));
  }
  if (!cs_each(c) || ++s->mb[g] == s->M) s->mb[g] = 0, s->cur[g]++;
  next_call(s, g, cs_len(s, g), now);
}

/*
** Streams: one per (source, destination) GPU pair that copies, its copies
** in the runtime's queue order (those that wait for no counter first). Also
** who posts each counter and which flag each reduction waits for.
*/
static void cs_build(Sim *s) {
  const Plan *pl = s->pl;
  int R = pl->prog->nranks, *id = NULL, *of = xmalloc(((size_t)pl->nce + 1) * sizeof *of);
  s->sq = xmalloc(((size_t)pl->nce + 1) * sizeof *s->sq);
  s->sq_off = xcalloc((size_t)pl->nce + 2, sizeof *s->sq_off);
  if (pl->nce) {
    id = xmalloc((size_t)R * (size_t)R * sizeof *id);
    memset(id, 0xff, (size_t)R * (size_t)R * sizeof *id);
  }
  int ns = 0;
  for (int i = 0; i < pl->nce; i++) {
    int *d = &id[pl->ce[i].src * R + pl->ce[i].dst];
    if (*d < 0) *d = ns++;
    of[i] = *d;
    s->sq_off[*d + 1]++;
  }
  for (int j = 0; j < ns; j++) s->sq_off[j + 1] += s->sq_off[j];
  int *fill = xmalloc(((size_t)ns + 1) * sizeof *fill);
  memcpy(fill, s->sq_off, (size_t)ns * sizeof *fill);
  for (int after = 0; after < 2; after++)
    for (int i = 0; i < pl->nce; i++)
      if ((pl->ce[i].after >= 0) == after) s->sq[fill[of[i]]++] = i;
  s->NA = s->NG + ns;
  s->cewait = xmalloc(((size_t)pl->np + 1) * sizeof *s->cewait);
  for (int i = 0; i < pl->np; i++) s->cewait[i] = -1;
  for (int i = 0; i < pl->nce; i++)
    if (pl->ce[i].flag >= 0) s->cewait[pl->task_recv[pl->ce[i].task]] = pl->ce[i].flag;
  s->poster = xmalloc(((size_t)pl->nceposts + 1) * sizeof *s->poster);
  for (int i = 0; i < pl->np; i++)
    if (pl->p[i].cepost >= 0) s->poster[pl->p[i].cepost] = i;
  s->landed = xcalloc((size_t)pl->nceflags + 1, sizeof *s->landed);
  free(id), free(of), free(fill);
}

/* ---------------------------------------------------------------- agents */

static void try_start(Sim *s, int g, double now) {
  if (g < s->NG) tb_try(s, g, now);
  else cs_try(s, g, now);
}

/* Agent g ended a call; at `len` calls it is done, else it tries its next. */
static void next_call(Sim *s, int g, int len, double now) {
  s->since[g] = now;
  if (s->cur[g] >= len) {
    s->state[g] = TS_DONE;
    s->end[g] = now;
    s->finished++;
    return;
  }
  s->state[g] = TS_BLOCKED;
  try_start(s, g, now);
}

/* ------------------------------------------------------------------ run */

double coll_busbw_factor(Coll c, int n) {
  if (n < 2) return 1;
  return c == COLL_ALLREDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
}

/* Describe a TB (or a copy stream) that never finished, for the stall error. */
static rcStatus stalled(const Sim *s, Err *e) {
  int g = 0;
  while (s->state[g] == TS_DONE) g++;
  char at[300];
  if (g >= s->NG) {
    const CeCopy *c = cs_copy(s, g);
    plan_task_where(s->pl, c->task, at, sizeof at);
    return err_set(e, RC_EDEADLOCK, "%s: simulation stalled: the copy engine's copy from rank %d to rank %d, "
                   "micro-batch %d, never becomes ready", at, c->src, c->dst, s->mb[g]);
  }
  const Prim *p = tb_prim(s, g);
  plan_task_where(s->pl, p->tin >= 0 ? p->tin : p->tout, at, sizeof at);
  return err_set(e, RC_EDEADLOCK,
                 "%s: simulation stalled (%s execution, FIFO depth %d): rank %d tb %d at %s, micro-batch %d, "
                 "never becomes ready",
                 at, s->pl->opt.order == EX_TASK ? "task-level" : "algorithm-level", s->o.depth, p->rank,
                 g / s->NT * s->pl->ntb[p->rank] + p->tb, prim_name(p->kind), s->mb[g]);
}

static void sim_free_state(Sim *s) {
  free(s->ord), free(s->ntask), free(s->done), free(s->arrived), free(s->sent), free(s->popped), free(s->tsent);
  free(s->cur), free(s->mb), free(s->next), free(s->state), free(s->since), free(s->t0), free(s->busy);
  free(s->idle), free(s->end), free(s->head), free(s->rem), free(s->rate), free(s->tlast), free(s->cap);
  free(s->fbytes), free(s->ver), free(s->path), free(s->npath), free(s->lpos), free(s->lseen), free(s->bw);
  free(s->lat), free(s->sat), free(s->gamma), free(s->share), free(s->lbytes), free(s->lactive), free(s->lsince);
  for (int l = 0; s->lflows && l < s->nl; l++) free(s->lflows[l]);
  free(s->lflows), free(s->nlf), free(s->caplf), free(s->stamp), free(s->heap), free(s->runq);
  free(s->dirty), free(s->isdirty), free(s->fkind), free(s->nkind), free(s->cewait), free(s->landed);
  free(s->poster), free(s->sq), free(s->sq_off);
}

/* The call's time: the end of its TBs and copies, then its copies' barriers and its pulls' handshakes. */
static void collect(Sim *s, SimResult *r) {
  const Plan *pl = s->pl;
  int R = pl->prog->nranks, NG = s->NG;
  double T = 0;
  for (int g = 0; g < s->NA; g++)
    if (s->end[g] > T) T = s->end[g];
  r->time_us = T + (pl->nce ? 2 * s->tp->ce_sync_us : 0) + (pl->npulls ? s->tp->pull_sync_us : 0);
  r->algbw = r->time_us > 0 ? s->o.size / r->time_us / 1e3 : 0;
  r->busbw = r->algbw * coll_busbw_factor(pl->prog->coll, R);
  r->tbs_per_rank_max = s->K * plan_tbs_max(pl);
  r->ntb = NG;
  r->tb = xmalloc(((size_t)NG + 1) * sizeof *r->tb);
  double sb = 0, si = 0, sr = 0;
  r->idle_max = 0;
  for (int g = 0; g < NG; g++) {
    int b = g % s->NT, k = g / s->NT, rank = 0;
    while (rank + 1 < R && pl->tb_base[rank + 1] <= b) rank++;
    SimTb *t = &r->tb[g];
    t->rank = rank, t->tb = k * pl->ntb[rank] + (b - pl->tb_base[rank]);
    t->busy = s->busy[g], t->idle = s->idle[g], t->end = s->end[g];
    double life = t->end > 0 ? t->end : 1, idle = t->idle / life;
    sb += t->busy / life, si += idle, sr += T > 0 ? (T - t->end) / T : 0;
    if (idle > r->idle_max) r->idle_max = idle;
  }
  r->busy_avg = NG ? sb / NG : 0, r->idle_avg = NG ? si / NG : 0, r->released_avg = NG ? sr / NG : 0;
  int capl = 0;
  for (int l = 0; l < s->nl; l++)
    if (s->lseen[l]) VEC_PUSH(r->link, r->nlink, capl, ((SimLink){l, s->lbytes[l], s->lactive[l]}));
  r->slice = s->slice, r->nslice = s->nslice;
  s->slice = NULL;
  r->events = s->events;
}

/* The GPU runtime is one process on one node: its copy engines and its
   pulls reach only that node's GPUs. */
static rcStatus one_node(const Plan *pl, Err *e) {
  int gpn = pl->topo->gpn;
  char at[300];
  for (int i = 0; i < pl->nce; i++) {
    const CeCopy *c = &pl->ce[i];
    if (c->src / gpn == c->dst / gpn) continue;
    plan_task_where(pl, c->task, at, sizeof at);
    return err_set(e, RC_EINVAL, "%s: a copy-engine copy from rank %d to rank %d crosses nodes (%s): the GPU runtime "
                   "runs on one node, where copy engines reach only its GPUs; compile without --ce", at, c->src,
                   c->dst, pl->topo->spec);
  }
  for (int i = 0; i < pl->np; i++) {
    const Prim *p = &pl->p[i];
    int src = p->pull ? pl->dag.t[p->tin].src : p->rank, to = p->pull && p->kind == PR_RRCS ? pl->dag.t[p->tout].dst : src;
    if (src / gpn == p->rank / gpn && to / gpn == p->rank / gpn) continue; /* not a pull, or one inside a node */
    int off = src / gpn != p->rank / gpn ? src : to;
    plan_task_where(pl, p->tin, at, sizeof at);
    return err_set(e, RC_EINVAL, "%s: rank %d %s rank %d, on another node (%s): the GPU runtime runs on one node, where "
                   "reads and puts reach only its GPUs; compile without --pull", at, p->rank,
                   off == src ? "pulls from" : "puts to", off, pl->topo->spec);
  }
  return RC_OK;
}

rcStatus sim_run(const Plan *pl, const SimOpts *o, SimResult *r, Err *e) {
  memset(r, 0, sizeof *r);
  if (!pl->verified) return err_set(e, RC_EINVAL, "the plan is not verified; refusing to simulate it");
  if (!(o->size > 0) || o->depth < 1 || o->instances < 1 || o->nmicro < 0 ||
      (o->nmicro == 0 && !o->gpu && !(o->tile > 0)) ||
      o->slowdown < 0 || o->slowdown >= 1)
    return err_set(e, RC_EINVAL, "simulation needs size > 0, tile > 0 or nmicro >= 1, depth >= 1, instances >= 1, "
                                 "slowdown in [0, 1)");
  if (pl->buffered && o->depth < BUFFERED_TILES)
    return err_set(e, RC_EINVAL, "%s TBs need connections that buffer two tiles: simulate with depth >= 2",
                   pl->opt.tb == TB_MANUAL ? "hand-placed" : "merged");
  RC_CHECK(one_node(pl, e));
  const Program *prog = pl->prog;
  Sim s = {.pl = pl, .tp = pl->topo, .o = *o, .K = o->instances, .NP = pl->np, .NT = pl->ntbs, .NC = pl->nconn};
  double block = prog->coll == COLL_ALLREDUCE ? o->size : o->size / prog->nranks;
  s.chunk_bytes = block / prog->chunks / s.K;
  if (o->gpu) /* nmicro= as RESCCL_NMICRO: raised where a slice would not fit a slot */
    s.M = (int)plan_nmicro(pl, (size_t)(block / 4), 4, (size_t)s.K, RX_SLOT_BYTES, (size_t)o->nmicro);
  else if (o->nmicro > 0) s.M = o->nmicro;
  else if (!(s.chunk_bytes / o->tile <= SIM_MAX_MICRO))
    return err_set(e, RC_ESIZE, "size %.0f bytes in tiles of %.0f makes more than %d micro-batches of %d chunks: "
                   "use larger tiles", o->size, o->tile, SIM_MAX_MICRO, prog->chunks);
  else s.M = (int)fmax(1, ceil(s.chunk_bytes / o->tile - 1e-9));
  if (s.chunk_bytes / s.M < 1) return err_set(e, RC_ESIZE, "size %.0f bytes is too small for %d micro-batches of "
                                                           "%d chunks", o->size, s.M, prog->chunks);
  int K = s.K, NCK = K * s.NC, NPK = K * s.NP;
  s.NG = K * s.NT;
  cs_build(&s);
  int NA = s.NA;
  s.ord = xmalloc(((size_t)pl->dag.n + 1) * sizeof(int));
  s.ntask = xcalloc((size_t)s.NC + 1, sizeof(int));
  /* A connection's tasks, numbered in the order its sending TB runs them (the
     verifier checked that the receiving TB runs them in the same order). */
  for (int b = 0; b < pl->ntbs; b++)
    for (int j = pl->tb_off[b]; j < pl->tb_off[b + 1]; j++) {
      const Prim *q = &pl->p[pl->tb_prims[j]];
      if (q->cout >= 0) s.ord[q->tout] = s.ntask[q->cout]++;
    }
  s.done = xcalloc((size_t)NPK + 1, sizeof(int));
  s.arrived = xcalloc((size_t)NCK + 1, sizeof(int));
  s.sent = xcalloc((size_t)NCK + 1, sizeof(int));
  s.popped = xcalloc((size_t)NCK + 1, sizeof(int));
  s.tsent = xcalloc(((size_t)NCK + 1) * (size_t)o->depth, sizeof(double));
  s.cur = xcalloc((size_t)NA + 1, sizeof(int));
  s.mb = xcalloc((size_t)NA + 1, sizeof(int));
  s.next = xcalloc((size_t)NA + 1, sizeof(int));
  s.state = xcalloc((size_t)NA + 1, 1);
  s.since = xcalloc((size_t)NA + 1, sizeof(double));
  s.t0 = xcalloc((size_t)NA + 1, sizeof(double));
  s.busy = xcalloc((size_t)NA + 1, sizeof(double));
  s.idle = xcalloc((size_t)NA + 1, sizeof(double));
  s.end = xcalloc((size_t)NA + 1, sizeof(double));
  int nres = NPK + 2 * NCK + pl->nceflags;
  s.head = xmalloc(((size_t)nres + 1) * sizeof(int));
  memset(s.head, 0xff, ((size_t)nres + 1) * sizeof(int));
  s.rem = xcalloc((size_t)NA + 1, sizeof(double));
  s.rate = xcalloc((size_t)NA + 1, sizeof(double));
  s.tlast = xcalloc((size_t)NA + 1, sizeof(double));
  s.cap = xcalloc((size_t)NA + 1, sizeof(double));
  s.fbytes = xcalloc((size_t)NA + 1, sizeof(double));
  s.ver = xcalloc((size_t)NA + 1, sizeof(unsigned));
  s.path = xcalloc(((size_t)NA + 1) * FLOW_MAXHOP, sizeof(int));
  s.npath = xcalloc((size_t)NA + 1, sizeof(int));
  s.lpos = xcalloc(((size_t)NA + 1) * FLOW_MAXHOP, sizeof(int));
  s.stamp = xcalloc((size_t)NA + 1, sizeof(int));
  s.fkind = xcalloc((size_t)NA + 1, 1);
  s.nl = pl->topo->nlinks;
  s.lseen = xcalloc((size_t)s.nl + 1, 1);
  s.isdirty = xcalloc((size_t)s.nl + 1, 1);
  double **dl[] = {&s.bw, &s.lat, &s.sat, &s.gamma, &s.share, &s.lbytes, &s.lactive, &s.lsince};
  for (size_t i = 0; i < sizeof dl / sizeof *dl; i++) *dl[i] = xcalloc((size_t)s.nl + 1, sizeof(double));
  s.lflows = xcalloc((size_t)s.nl + 1, sizeof(int *));
  s.nlf = xcalloc((size_t)s.nl + 1, sizeof(int));
  s.caplf = xcalloc((size_t)s.nl + 1, sizeof(int));
  s.nkind = xcalloc((size_t)s.nl * NFK + 1, sizeof(int));

  for (int g = 0; g < NA; g++) /* a TB with nothing to run (a gap in manual placement) is done from the start */
    if (g < s.NG && tb_len(&s, g) == 0) next_call(&s, g, 0, 0);
    else try_start(&s, g, 0);
  for (double now = 0;;) {
    if (s.ndirty && (s.nheap == 0 || s.heap[0].t > now)) reshare(&s, now);
    if (s.nheap == 0) break;
    Ev ev = ev_pop(&s);
    now = ev.t;
    s.events++;
    int g = ev.id, tb = g < s.NG;
    if (ev.kind == EV_FLOW) {
      if (ev.ver != s.ver[g]) continue; /* the flow's rate changed since */
      double lat = flow_end(&s, g, ev.t);
      if (tb && !tb_prim(&s, g)->pull) {
        ev_push(&s, ev.t + lat, EV_ARRIVE, g / s.NT * s.NC + tb_prim(&s, g)->cout, 0);
        tb_finish(&s, g, ev.t);
      } else { /* a copy or a read ends when its last bytes have come */
        s.state[g] = TS_LOCAL;
        ev_push(&s, ev.t + lat, EV_STEP, g, 0);
      }
    } else if (ev.kind == EV_ARRIVE) {
      s.arrived[ev.id]++;
      wake(&s, NPK + ev.id);
    } else if (s.state[g] == TS_ALPHA) {
      if (tb) tb_data(&s, g, ev.t);
      else cs_data(&s, g, ev.t);
    } else {
      if (tb) tb_finish(&s, g, ev.t);
      else cs_finish(&s, g, ev.t);
    }
    while (s.nrun > 0) try_start(&s, s.runq[--s.nrun], ev.t);
  }
  rcStatus rc = s.finished == NA ? RC_OK : stalled(&s, e);
  if (rc == RC_OK) collect(&s, r);
  sim_free_state(&s);
  free(s.slice);
  r->nmicro = s.M;
  r->tile_bytes = s.chunk_bytes / s.M;
  return rc;
}

void sim_free(SimResult *r) {
  free(r->tb), free(r->link), free(r->slice);
  memset(r, 0, sizeof *r);
}
