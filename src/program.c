/*
** program.c — the Program: ranks, buffers measured in chunks, and the list of
** recorded transfers with their source positions. prog_tasks resolves a
** program for one buffer placement (in-place or out-of-place) into Tasks, the
** input of the DAG stage.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static const char *const coll_names[NCOLL] = {"allgather", "reducescatter", "allreduce", "alltoall"};
static const char *const buf_names[NBUF] = {"input", "output", "scratch"};

const char *coll_name(Coll c) { return (unsigned)c < NCOLL ? coll_names[c] : "?"; }

int coll_parse(const char *s) {
  for (int i = 0; i < NCOLL; i++)
    if (strcmp(s, coll_names[i]) == 0) return i;
  if (strcmp(s, "reduce_scatter") == 0) return COLL_REDUCESCATTER; /* MSCCL's spelling */
  return -1;
}

const char *buf_name(int b) { return (unsigned)b < NBUF ? buf_names[b] : "?"; }

int buf_parse(const char *s) {
  for (int i = 0; i < NBUF; i++)
    if (strcmp(s, buf_names[i]) == 0) return i;
  return -1;
}

/* A program's name: one word of 1..63 bytes, [A-Za-z0-9_][A-Za-z0-9_.+-]*,
   as plan files and libresccl read it. It reaches the emitted code and
   the plan file, so nothing else is taken. */
int prog_name_ok(const char *s, size_t n) {
  if (n < 1 || n > 63) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    int word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!word && (i == 0 || (c != '.' && c != '+' && c != '-'))) return 0;
  }
  return 1;
}

Program *prog_new(const char *name, Coll coll, int nranks, int gpn, int chunks) {
  Program *p = xcalloc(1, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->coll = coll;
  p->nranks = nranks;
  p->gpn = gpn;
  p->chunks = chunks;
  p->max_xf = MAX_XFERS;
  return p;
}

void prog_free(Program *p) {
  if (!p) return;
  for (int i = 0; i < p->nfiles; i++) free(p->files[i]);
  free(p->files);
  free(p->xf);
  free(p->hint);
  free(p);
}

/* Intern a file name; transfers refer to it by index. A program names a
   few files (its script, an importer's input): past 256, -1 (messages then
   name the program), so that names do not pile up without bound. */
int prog_file(Program *p, const char *file) {
  for (int i = p->nfiles - 1; i >= 0; i--)
    if (strcmp(p->files[i], file) == 0) return i;
  if (p->nfiles >= 256) return -1;
  p->files = xrealloc(p->files, (size_t)(p->nfiles + 1) * sizeof *p->files);
  p->files[p->nfiles] = strcpy(xmalloc(strlen(file) + 1), file);
  return p->nfiles++;
}

const char *prog_where(const Program *p, Src at, char *out, size_t n) {
  if (at.file >= 0 && at.file < p->nfiles)
    snprintf(out, n, "%s:%d", p->files[at.file], at.line);
  else
    snprintf(out, n, "%s", p->name);
  return out;
}

/* Chunks per rank in each buffer, as MSCCL's collectives size them. */
int prog_bufchunks(const Program *p, int buf) {
  int c = p->chunks, r = p->nranks;
  switch (buf) {
  case BUF_INPUT:
    return p->coll == COLL_REDUCESCATTER || p->coll == COLL_ALLTOALL ? r * c : c;
  case BUF_OUTPUT:
    return p->coll == COLL_ALLGATHER || p->coll == COLL_ALLTOALL ? r * c : c;
  default:
    return p->scratch_chunks;
  }
}

/* Validate and append one transfer (as several, when it spans blocks); the
   message blames the transfer's line. */
rcStatus prog_add(Program *p, const Xfer *x, Err *e) {
  char at[300];
  prog_where(p, x->at, at, sizeof at);
  if (x->src < 0 || x->src >= p->nranks)
    return err_set(e, RC_EINVAL, "%s: source rank %d out of range (program has %d ranks)", at, x->src, p->nranks);
  if (x->dst < 0 || x->dst >= p->nranks)
    return err_set(e, RC_EINVAL, "%s: destination rank %d out of range (program has %d ranks)", at, x->dst,
                   p->nranks);
  if (x->cnt < 1 || x->cnt > MAX_CHUNKS)
    return err_set(e, RC_EINVAL, "%s: chunk count %d must be 1..%d", at, x->cnt, MAX_CHUNKS);
  if (x->sbuf >= NBUF || x->dbuf >= NBUF) return err_set(e, RC_EINVAL, "%s: unknown buffer", at);
  if (x->op != OP_COPY && x->op != OP_REDUCE) return err_set(e, RC_EINVAL, "%s: unknown operation", at);
  const int b[2] = {x->sbuf, x->dbuf}, idx[2] = {x->sidx, x->didx};
  for (int k = 0; k < 2; k++) {
    /* Scratch grows with use, up to what later stages hold: a word or more per chunk of every rank's. */
    int scratch = b[k] == BUF_SCRATCH, size = scratch ? MAX_CHUNKS / p->nranks : prog_bufchunks(p, b[k]);
    if (idx[k] < 0 || idx[k] > size - x->cnt)
      return err_set(e, RC_EINVAL, "%s: %s chunk %d%s out of range (%s has %s%d chunks per rank)", at, buf_name(b[k]),
                     idx[k], x->cnt > 1 ? "+count" : "", buf_name(b[k]), scratch ? "at most " : "", size);
  }
  if (x->src == x->dst && x->sbuf == x->dbuf && x->sidx < x->didx + x->cnt && x->didx < x->sidx + x->cnt &&
      !(x->sidx == x->didx && x->op == OP_COPY))
    return err_set(e, RC_EINVAL, "%s: source and destination overlap on rank %d", at, x->src);
  /* A transfer never crosses a block (see rx_tile): cut it where either end does. */
  Xfer part = *x;
  int nxf0 = p->nxf;
  while (part.cnt > 0) {
    int C = p->chunks, n = part.cnt;
    if (C - part.sidx % C < n) n = C - part.sidx % C;
    if (C - part.didx % C < n) n = C - part.didx % C;
    if (p->nxf == p->max_xf) {
      p->nxf = nxf0;
      return err_set(e, RC_EINVAL, "%s: program has more than %d transfers (cut at blocks of %d chunks)", at, p->max_xf,
                     p->chunks);
    }
    Xfer piece = part;
    piece.cnt = n;
    int cap = p->capxf;
    VEC_PUSH(p->xf, p->nxf, p->capxf, piece);
    if (p->hint) {
      if (cap != p->capxf) p->hint = xrealloc(p->hint, (size_t)p->capxf * sizeof *p->hint);
      p->hint[p->nxf - 1] = (TbHint){-1, -1, -1, -1, -1};
    }
    part.sidx += n, part.didx += n, part.cnt -= n;
  }
  for (int k = 0; k < 2; k++)
    if (b[k] == BUF_SCRATCH && idx[k] + x->cnt > p->scratch_chunks) p->scratch_chunks = idx[k] + x->cnt;
  return RC_OK;
}

/* Attach a TB hint to transfer xf; the first hint allocates the table. */
void prog_hint(Program *p, int xf, TbHint h) {
  if (!p->hint) {
    p->hint = xmalloc((size_t)(p->capxf ? p->capxf : 1) * sizeof *p->hint);
    for (int i = 0; i < p->nxf; i++) p->hint[i] = (TbHint){-1, -1, -1, -1, -1};
  }
  p->hint[xf] = h;
}

/*
** In-place placement aliases one buffer onto a part of the other, exactly as
** NCCL lays out in-place calls (and MSCCL's get_buffer_index):
**   allgather:     input chunk j of rank r  = output chunk r*C + j
**   reducescatter: output chunk j of rank r = input chunk r*C + j
**   allreduce, alltoall: input = output
*/
static void alias(const Program *p, int rank, uint8_t *buf, int *idx) {
  switch (p->coll) {
  case COLL_ALLGATHER:
    if (*buf == BUF_INPUT) *buf = BUF_OUTPUT, *idx += rank * p->chunks;
    break;
  case COLL_REDUCESCATTER:
    if (*buf == BUF_OUTPUT) *buf = BUF_INPUT, *idx += rank * p->chunks;
    break;
  default:
    if (*buf == BUF_INPUT) *buf = BUF_OUTPUT;
    break;
  }
}

static const Xfer *sort_base;
static int by_step(const void *a, const void *b) {
  const Xfer *x = sort_base + *(const int *)a, *y = sort_base + *(const int *)b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return *(const int *)a - *(const int *)b; /* stable: record order */
}

/*
** Tasks in dependency order: by step, then record order. Paper-style loops
** record rank by rank, so record order alone would read chunks before the
** step that delivers them.
*/
rcStatus prog_tasks(const Program *p, int inplace, Task **out, int *n, Err *e) {
  (void)e;
  int *ord = xmalloc((size_t)p->nxf * sizeof *ord);
  for (int i = 0; i < p->nxf; i++) ord[i] = i;
  sort_base = p->xf;
  qsort(ord, (size_t)p->nxf, sizeof *ord, by_step);
  Task *t = xmalloc((size_t)p->nxf * sizeof *t);
  int k = 0;
  for (int i = 0; i < p->nxf; i++) {
    const Xfer *x = &p->xf[ord[i]];
    Task tk = {.src = x->src, .dst = x->dst, .sidx = x->sidx, .didx = x->didx, .cnt = x->cnt,
               .xf = ord[i], .chunk = x->didx, .sbuf = x->sbuf, .dbuf = x->dbuf, .op = x->op};
    if (inplace) {
      alias(p, tk.src, &tk.sbuf, &tk.sidx);
      alias(p, tk.dst, &tk.dbuf, &tk.didx);
    }
    tk.obuf = tk.dbuf, tk.oidx = tk.didx;
    if (tk.src == tk.dst && tk.sbuf == tk.dbuf && tk.sidx == tk.didx && tk.op == OP_COPY) continue;
    t[k++] = tk;
  }
  free(ord);
  *out = t;
  *n = k;
  return RC_OK;
}
