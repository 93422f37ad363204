/*
** planfile.c — libresccl's reader of plan files (the contract is
** src/planfile.h; artifact.c writes them). In: a file's bytes. Out: its
** sections, each with the kernel source the runtime builds, or the first
** fault as "path:line: field: what".
**
** Nothing in a plan file is trusted: the digest must match, every number
** lies in its range, the buffers are the collective's, and the kernel body
** is parsed statement by statement (planfile.h's grammar) with every index
** checked against the header: connections and flags of the rank that uses
** them, chunks inside their buffer and block, the TBs and their entries as
** the header counts them. The kernel source is libresccl's own templates
** and the statements printed anew, so no text of the file but numbers and
** the table's names reaches NVRTC. No CUDA here: the tests and the fuzz
** target link this file alone.
*/
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "../planfile.h"
#include "../../kernels-templates/cuda_abi.h"

enum { MAXTB = 4096, MAXCONN = 1 << 20, MAXFLAGS = 1 << 24, MAXCHUNKS = 1 << 24, MAXPRIM = 1 << 24 };

/* The kernel source being printed; oom: an allocation failed. */
typedef struct {
  char *s;
  size_t n, cap;
  int oom;
} Out;

static void out_add(Out *o, const char *s, size_t n) {
  if (o->oom) return;
  if (o->n + n + 1 > o->cap) {
    size_t cap = o->cap ? o->cap : 1 << 16;
    while (cap < o->n + n + 1) cap *= 2;
    char *t = realloc(o->s, cap);
    if (!t) {
      o->oom = 1;
      return;
    }
    o->s = t, o->cap = cap;
  }
  memcpy(o->s + o->n, s, n), o->n += n, o->s[o->n] = '\0';
}

static void out_puts(Out *o, const char *s) { out_add(o, s, strlen(s)); }

static void out_printf(Out *o, const char *fmt, ...) {
  char t[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t, sizeof t, fmt, ap);
  va_end(ap);
  out_add(o, t, (size_t)n < sizeof t ? (size_t)n : sizeof t - 1);
}

typedef struct {
  const char *path, *s, *end; /* the text still to read; end: where the digest line starts */
  int line;
  char *err;
  size_t errn;
  Out out;
} Rd;

static int fail(Rd *r, const char *field, const char *fmt, ...) {
  int n = snprintf(r->err, r->errn, "%s:%d: %s: ", r->path, r->line, field);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < r->errn) vsnprintf(r->err + n, r->errn - (size_t)n, fmt, ap);
  va_end(ap);
  return 0;
}

/* ------------------------------------------------------------ header lines */

/* At most 40 bytes of the file's text for a message, printable: '?' for others. */
static const char *shown(const char *s, const char *end, char out[48]) {
  int i = 0;
  for (; i < 40 && s + i < end; i++) out[i] = s[i] >= 32 && s[i] < 127 ? s[i] : '?';
  out[i] = '\0';
  return out;
}

/* The next line, which must start with `key` ("": a line of numbers of
   `field`); *args: what follows the key. */
static int line(Rd *r, const char *key, const char *field, const char **args, const char **eol) {
  const char *nl = memchr(r->s, '\n', (size_t)(r->end - r->s));
  if (!nl) return fail(r, field, "missing (the file ends before it)");
  size_t k = strlen(key);
  if ((size_t)(nl - r->s) < k || memcmp(r->s, key, k) || (k && r->s + k < nl && r->s[k] != ' '))
    return fail(r, field, "expected here, found \"%s\"", shown(r->s, nl, (char[48]){0}));
  *args = r->s + k, *eol = nl;
  return 1;
}

/* One decimal integer in [lo, hi] at *p (after one space, but at the start
   of a line), before eol. */
static int num(Rd *r, const char *field, const char **p, const char *eol, long long lo, long long hi, int *out) {
  const char *s = *p;
  if (s != r->s && (s >= eol || *s++ != ' ')) return fail(r, field, "a number is missing");
  if (s >= eol) return fail(r, field, "a number is missing");
  int neg = *s == '-';
  s += neg;
  long long v = 0; /* saturates past 2^40, far past any range */
  const char *d = s;
  for (; s < eol && *s >= '0' && *s <= '9'; s++) v = v > (1ll << 40) ? v : v * 10 + (*s - '0');
  if (s == d || (s < eol && *s != ' ')) return fail(r, field, "not a number: \"%s\"", shown(*p, eol, (char[48]){0}));
  if (neg) v = -v;
  if (v < lo || v > hi) return fail(r, field, "%.*s out of range (%lld..%lld)", (int)(s - d + neg), d - neg, lo, hi);
  *out = (int)v, *p = s;
  return 1;
}

/* A line "key n1 n2 ..." of `n` numbers in [lo, hi]. */
static int intsf(Rd *r, const char *key, const char *field, int *out, int n, long long lo, long long hi) {
  const char *p, *eol;
  if (!line(r, key, field, &p, &eol)) return 0;
  for (int i = 0; i < n; i++)
    if (!num(r, field, &p, eol, lo, hi, &out[i])) return 0;
  if (p != eol) return fail(r, field, "more than %d number%s", n, n > 1 ? "s" : "");
  r->s = eol + 1, r->line++;
  return 1;
}

static int ints(Rd *r, const char *key, int *out, int n, long long lo, long long hi) {
  return intsf(r, key, key, out, n, lo, hi);
}

/* `count` lines of at least `bytes` each can follow: a header cannot make
   the reader allocate more than the file could fill. */
static int room(Rd *r, const char *field, int count, size_t bytes) {
  if ((size_t)count <= (size_t)(r->end - r->s) / bytes) return 1;
  return r->line--, fail(r, field, "%d lines, more than the rest of the file holds", count);
}

/* A line "key word" whose word is one of `words` (NULL-ended); its index. */
static int word(Rd *r, const char *key, const char *const *words, int *out) {
  const char *p, *eol;
  if (!line(r, key, key, &p, &eol)) return 0;
  for (int i = 0; words[i]; i++)
    if (eol - p == (long)strlen(words[i]) + 1 && p[0] == ' ' && !memcmp(p + 1, words[i], strlen(words[i]))) {
      *out = i, r->s = eol + 1, r->line++;
      return 1;
    }
  return fail(r, key, "\"%s\" is not one of the known ones", shown(p + (p < eol), eol, (char[48]){0}));
}

/* ------------------------------------------------------------ kernel body */

typedef struct {
  const char *s, *end; /* the body still to read */
  enum { T_END, T_NAME, T_NUM, T_PUNCT } kind;
  const char *tok;
  size_t len;
  long long v;
} Lex;

static int next(Rd *r, Lex *x) {
  for (;;) {
    while (x->s < x->end && (*x->s == ' ' || *x->s == '\n' || *x->s == '\t')) r->line += *x->s++ == '\n';
    if (x->end - x->s >= 2 && x->s[0] == '/' && x->s[1] == '*') {
      const char *c = x->s + 2;
      while (x->end - c >= 2 && !(c[0] == '*' && c[1] == '/')) r->line += *c++ == '\n';
      if (x->end - c < 2) return fail(r, "kernel", "a comment that does not end");
      x->s = c + 2;
      continue;
    }
    break;
  }
  x->tok = x->s;
  if (x->s == x->end) return x->kind = T_END, x->len = 0, 1;
  char c = *x->s;
  if ((c >= 'A' && c <= 'Z') || c == '_') {
    while (x->s < x->end && ((*x->s >= 'A' && *x->s <= 'Z') || (*x->s >= '0' && *x->s <= '9') || *x->s == '_')) x->s++;
    return x->kind = T_NAME, x->len = (size_t)(x->s - x->tok), 1;
  }
  if (c >= '0' && c <= '9') {
    x->v = 0; /* saturates past 2^40, far past any range */
    for (; x->s < x->end && *x->s >= '0' && *x->s <= '9'; x->s++) x->v = x->v > (1ll << 40) ? x->v : x->v * 10 + (*x->s - '0');
    return x->kind = T_NUM, x->len = (size_t)(x->s - x->tok), 1;
  }
  if (strchr("(),;{}", c) && c) return x->kind = T_PUNCT, x->len = 1, x->s++, 1;
  return fail(r, "kernel", (unsigned char)c >= 32 && (unsigned char)c < 127 ? "unexpected '%c'" : "unexpected byte 0x%02x",
              (unsigned char)c);
}

static int is(const Lex *x, const char *t) { return x->len == strlen(t) && !memcmp(x->tok, t, x->len); }

static int expect(Rd *r, Lex *x, const char *t) {
  if (!next(r, x)) return 0;
  if (!is(x, t)) return fail(r, "kernel", "expected %s, found \"%.*s\"", t, (int)(x->len > 40 ? 40 : x->len), x->tok);
  return 1;
}

/* A number argument in [lo, hi]; `sep`: the punctuation after it. */
static int arg(Rd *r, Lex *x, const char *what, long long lo, long long hi, const char *sep, int *out) {
  if (!next(r, x)) return 0;
  if (x->kind != T_NUM) return fail(r, "kernel", "%s: expected a number, found \"%.*s\"", what, (int)(x->len > 40 ? 40 : x->len), x->tok);
  if (x->v < lo || x->v > hi) return fail(r, "kernel", "%s %lld out of range (%lld..%lld)", what, x->v, lo, hi);
  *out = (int)x->v;
  return expect(r, x, sep);
}

typedef struct {
  PfSection *p;
  int rank, pulls_seen;
  char *posted;  /* per counter: RX_CE_POST seen */
} Body;

/* One statement's arguments, after its name and "(": each checked against
   the header for rank b->rank, then printed. */
static int statement(Rd *r, Lex *x, Body *b, RxStatement st) {
  const PfSection *p = b->p;
  const char *sig = rx_statements[st].args, *name = rx_statements[st].name;
  int v[16], bufs[8], idxs[8], nb = 0, n = 1, conn = -1;
  size_t na = strlen(sig);
  out_puts(&r->out, name), out_puts(&r->out, "(");
  for (size_t k = 0; k < na; k++) {
    const char *sep = k + 1 < na ? "," : ")";
    char c = sig[k];
    if (c == 'b') {
      if (!next(r, x)) return 0;
      int i = 0;
      while (i < 3 && !is(x, rx_buffers[i])) i++;
      if (i == 3) return fail(r, "kernel", "%s: argument %zu must be a buffer, found \"%.*s\"", name, k + 1, (int)(x->len > 40 ? 40 : x->len), x->tok);
      if (!expect(r, x, sep)) return 0;
      bufs[nb] = i, v[k] = i;
      out_puts(&r->out, rx_buffers[i]);
    } else {
      long long lo = 0, hi = 0;
      const char *what = "";
      switch (c) {
      case 'o': case 'I': lo = 0, hi = p->nconn - 1, what = "connection"; break;
      case 'p': lo = 0, hi = p->nranks - 1, what = "rank"; break;
      case 'i': lo = 0, hi = p->bufchunks[bufs[nb]] - 1, what = "chunk"; break;
      case 'n': lo = 1, hi = p->maxcnt, what = "count"; break;
      case 'l': lo = 0, hi = 1, what = "switch"; break;
      case 'f': lo = 0, hi = p->nflags - 1, what = "flag"; break;
      case 'e': lo = 0, hi = p->nceflags - 1, what = "copy-engine flag"; break;
      case 'k': lo = 0, hi = p->ncounters - 1, what = "counter"; break;
      case 'a': lo = 0, hi = MAXPRIM - 1, what = "primitive"; break;
      }
      char w[80];
      snprintf(w, sizeof w, "%s: %s", name, what);
      if (!arg(r, x, w, lo, hi, sep, &v[k])) return 0;
      if ((c == 'o' && p->csrc[v[k]] != b->rank) || (c == 'I' && p->cdst[v[k]] != b->rank))
        return fail(r, "kernel", "%s: connection %d is %d -> %d, not one rank %d %s on", name, v[k], p->csrc[v[k]],
                    p->cdst[v[k]], b->rank, c == 'o' ? "sends" : "receives");
      if (c == 'p' && conn >= 0 && v[k] != p->cdst[conn])
        return fail(r, "kernel", "%s: rank %d is not connection %d's receiver (%d)", name, v[k], conn, p->cdst[conn]);
      if (c == 'f' && p->flag_rank[v[k]] != b->rank)
        return fail(r, "kernel", "%s: flag %d is rank %d's, not rank %d's", name, v[k], p->flag_rank[v[k]], b->rank);
      if (c == 'o') conn = v[k];
      if (c == 'i') idxs[nb++] = v[k];
      if (c == 'n') n = v[k];
      if (c == 'k') b->posted[v[k]] = 1;
      out_printf(&r->out, "%d", v[k]);
    }
    out_puts(&r->out, k + 1 < na ? ", " : ")");
  }
  /* A range stays inside its buffer and its block of chunks (prog_add cuts transfers there). */
  for (int j = 0; j < nb; j++)
    if (idxs[j] + n > p->bufchunks[bufs[j]] || idxs[j] / p->chunks != (idxs[j] + n - 1) / p->chunks)
      return fail(r, "kernel", "%s: chunks %d..%d of %s leave %s (%d chunks per rank, blocks of %d)", name, idxs[j],
                  idxs[j] + n - 1, rx_buffers[bufs[j]], idxs[j] + n > p->bufchunks[bufs[j]] ? "the buffer" : "their block",
                  p->bufchunks[bufs[j]], p->chunks);
  b->pulls_seen += st == RXS_PULL || st == RXS_RRC_PULL || st == RXS_RRCS_PULL;
  return expect(r, x, ";") && (out_puts(&r->out, ";\n"), 1);
}

/* One TB: RX_TB(rank, tb) { ... }, after its name; its entries (RX_FOR_M loops). */
static int tb(Rd *r, Lex *x, Body *b, int t, int *entries) {
  int rr, tt;
  if (!expect(r, x, "(") || !arg(r, x, "RX_TB: rank", b->rank, b->rank, ",", &rr) || !arg(r, x, "RX_TB: TB", t, t, ")", &tt) ||
      !expect(r, x, "{"))
    return 0;
  out_printf(&r->out, "RX_TB(%d, %d) {\n", rr, tt);
  *entries = 0;
  int loop = 0;
  for (;;) {
    if (!next(r, x)) return 0;
    if (is(x, "}")) {
      out_puts(&r->out, "}\n");
      if (!loop) return 1;
      loop = 0;
      continue;
    }
    if (is(x, "RX_FOR_M")) {
      if (loop) return fail(r, "kernel", "RX_FOR_M inside RX_FOR_M");
      if (!expect(r, x, "{")) return 0;
      out_puts(&r->out, "RX_FOR_M {\n");
      loop = 1, ++*entries;
      continue;
    }
    int st = 0;
    while (st < RXS_N && !is(x, rx_statements[st].name)) st++;
    if (st == RXS_N) return fail(r, "kernel", "\"%.*s\" is not a statement of a TB", (int)(x->len > 40 ? 40 : x->len), x->tok);
    if (!loop && st != RXS_AT) return fail(r, "kernel", "%s outside RX_FOR_M", rx_statements[st].name);
    if (!expect(r, x, "(") || !statement(r, x, b, (RxStatement)st)) return 0;
  }
}

/* The body: per rank its TBs in order and its table, then the program's table. */
static int body(Rd *r, PfSection *p, int ce_line, const char *s, size_t n) {
  Lex x = {.s = s, .end = s + n};
  Body b = {.p = p, .posted = calloc((size_t)p->ncounters + 1, 1)};
  int *entries = malloc(sizeof(int) * MAXTB), ok = b.posted && entries, k;
  if (!ok) fail(r, "kernel", "out of memory");
  for (b.rank = 0; ok && b.rank < p->nranks; b.rank++) {
    int R = b.rank, v;
    for (int t = 0; ok && t < p->ntb[R]; t++) ok = expect(r, &x, "RX_TB") && tb(r, &x, &b, t, &entries[t]);
    ok = ok && expect(r, &x, "RX_RANK_BEGIN") && expect(r, &x, "(") && arg(r, &x, "RX_RANK_BEGIN: rank", R, R, ")", &v);
    out_printf(&r->out, "RX_RANK_BEGIN(%d)\n", R);
    for (int t = 0; ok && t < p->ntb[R]; t++) {
      ok = expect(r, &x, "RX_RANK_TB") && expect(r, &x, "(") && arg(r, &x, "RX_RANK_TB: rank", R, R, ",", &v) &&
           arg(r, &x, "RX_RANK_TB: TB", t, t, ",", &v) &&
           arg(r, &x, "RX_RANK_TB: entries (RX_FOR_M loops of the TB)", entries[t], entries[t], ")", &v);
      out_printf(&r->out, "RX_RANK_TB(%d, %d, %d)\n", R, t, entries[t]);
    }
    ok = ok && expect(r, &x, "RX_RANK_END") && expect(r, &x, "(") && arg(r, &x, "RX_RANK_END: rank", R, R, ")", &v);
    out_printf(&r->out, "RX_RANK_END(%d)\n", R);
  }
  /* A kernel that pulls needs every rank's buffers, and may put too (2). */
  ok = ok && expect(r, &x, "RX_PROGRAM_BEGIN") && expect(r, &x, "(") &&
       arg(r, &x, "RX_PROGRAM_BEGIN: ranks", p->nranks, p->nranks, ",", &k) &&
       arg(r, &x, "RX_PROGRAM_BEGIN: pulls (0, or 1 or 2 with pulls)", p->pulls ? 1 : 0, p->pulls ? 2 : 0, ")", &k);
  out_printf(&r->out, "RX_PROGRAM_BEGIN(%d, %d)\n", p->nranks, k);
  for (int R = 0, v; ok && R < p->nranks; R++) {
    ok = expect(r, &x, "RX_PROGRAM_RANK") && expect(r, &x, "(") && arg(r, &x, "RX_PROGRAM_RANK: rank", R, R, ",", &v) &&
         arg(r, &x, "RX_PROGRAM_RANK: TBs", p->ntb[R], p->ntb[R], ")", &v);
    out_printf(&r->out, "RX_PROGRAM_RANK(%d, %d)\n", R, p->ntb[R]);
  }
  ok = ok && expect(r, &x, "RX_PROGRAM_END") && next(r, &x);
  if (ok && x.kind != T_END) ok = fail(r, "kernel", "\"%.*s\" after RX_PROGRAM_END", (int)(x.len > 40 ? 40 : x.len), x.tok);
  out_puts(&r->out, "RX_PROGRAM_END\n");
  if (ok && (b.pulls_seen > 0) != (p->pulls > 0))
    ok = fail(r, "pulls", "%d, but the kernel has %s", p->pulls, b.pulls_seen ? "pulls" : "none");
  /* A copy that waits for a counter the kernel never posts would wait forever. */
  for (int i = 0; ok && i < p->nce; i++)
    if (p->ce[CE_INTS * i + 8] >= 0 && !b.posted[p->ce[CE_INTS * i + 8]])
      r->line = ce_line + i, ok = fail(r, "copies", "copy %d waits for counter %d, which the kernel never posts", i,
                                       p->ce[CE_INTS * i + 8]);
  free(b.posted), free(entries);
  return ok;
}

/* ------------------------------------------------------------ sections */

int pf_agree(const PfAgree *all, int n, char *err, size_t errn) {
  for (int r = 1; r < n; r++) {
    const PfAgree *a = &all[0], *b = &all[r];
    if (a->hash != b->hash)
      return snprintf(err, errn, "ranks loaded different plans: rank 0 %.63s (hash %016llx), rank %d %.63s (hash "
                      "%016llx)", a->file, a->hash, r, b->file, b->hash), 0;
    if (a->lo != b->lo || a->hi != b->hi)
      return snprintf(err, errn, "%.63s: rank 0 loaded it for %llu to %llu bytes, rank %d for %llu to %llu", a->file,
                      a->lo, a->hi, r, b->lo, b->hi), 0;
    if (memcmp(&a->slot_bytes, &b->slot_bytes, offsetof(PfAgree, file) - offsetof(PfAgree, slot_bytes)))
      return snprintf(err, errn, "%.63s: rank 0 and rank %d differ in RESCCL_NCHANNELS, RESCCL_SLICES, RESCCL_SLOTS, "
                      "RESCCL_SLOT_BYTES, RESCCL_TILE_BYTES, RESCCL_NMICRO, RESCCL_DIRECT or RESCCL_DTYPES: set them "
                      "alike on every rank", a->file, r), 0;
  }
  return 1;
}

void pf_free(PfSection *s) {
  if (!s) return;
  free(s->ntb), free(s->csrc), free(s->cdst), free(s->flag_rank), free(s->ce), free(s->src);
  memset(s, 0, sizeof *s);
}

static int section(Rd *r, PfSection *p) {
  static const char *const colls[] = {"allreduce", "allgather", "reducescatter", "alltoall", NULL};
  static const char *const places[] = {"out-of-place", "in-place", NULL};
  const char *a, *eol;
  int version, coll;
  p->line = r->line;
  if (!ints(r, "resccl-plan", &version, 1, 0, 1 << 30)) return 0;
  if (version != RX_PLAN_VERSION) return r->line--, fail(r, "resccl-plan", "version %d, not %d: compile the plan again", version, RX_PLAN_VERSION);
  if (!line(r, "name", "name", &a, &eol)) return 0;
  if (eol - a < 2 || eol - a > 64 || a[0] != ' ' ||
      !rx_name_ok(a + 1, (size_t)(eol - a - 1)) || (memcpy(p->name, a + 1, (size_t)(eol - a - 1)), p->name[eol - a - 1] = '\0', 0))
    return fail(r, "name", "not one word of letters, digits and _.+- (at most 63 bytes)");
  r->s = eol + 1, r->line++;
  if (!word(r, "collective", colls, &coll) || !word(r, "placement", places, &p->inplace)) return 0;
  snprintf(p->coll, sizeof p->coll, "%s", colls[coll]);
  if (!ints(r, "ranks", &p->nranks, 1, 1, RX_MAXRANKS) || !ints(r, "chunks", &p->chunks, 1, 1, MAXCHUNKS) ||
      !ints(r, "bufchunks", p->bufchunks, 3, 0, MAXCHUNKS))
    return 0;
  /* The input and output are the caller's buffers: exactly the collective's. */
  int R = p->nranks, C = p->chunks, many_in = coll == 2 || coll == 3, many_out = coll == 1 || coll == 3;
  if ((long long)p->bufchunks[0] != (many_in ? (long long)R * C : C) || (long long)p->bufchunks[1] != (many_out ? (long long)R * C : C))
    return r->line--, fail(r, "bufchunks", "input %d and output %d chunks, but a %s of %d ranks in chunks of %d has %lld and %lld",
                           p->bufchunks[0], p->bufchunks[1], p->coll, R, C, many_in ? (long long)R * C : C,
                           many_out ? (long long)R * C : C);
  int maxbuf = p->bufchunks[0] > p->bufchunks[1] ? p->bufchunks[0] : p->bufchunks[1];
  if (!ints(r, "fifo-slots", &p->fifo_slots, 1, 0, 64) || !ints(r, "maxcnt", &p->maxcnt, 1, 1, C < maxbuf ? C : maxbuf) ||
      !ints(r, "even", &p->even, 1, 0, 1))
    return 0;
  if (!(p->ntb = malloc(sizeof(int) * (size_t)R))) return fail(r, "tbs", "out of memory");
  if (!ints(r, "tbs", p->ntb, R, 0, MAXTB) || !ints(r, "conns", &p->nconn, 1, 0, MAXCONN) || !room(r, "conns", p->nconn, 4))
    return 0;
  p->csrc = malloc(sizeof(int) * ((size_t)p->nconn + 1)), p->cdst = malloc(sizeof(int) * ((size_t)p->nconn + 1));
  if (!p->csrc || !p->cdst) return fail(r, "conns", "out of memory");
  for (int c = 0; c < p->nconn; c++) {
    int sd[2];
    if (!intsf(r, "", "conns", sd, 2, 0, R - 1)) return 0;
    if (sd[0] == sd[1]) return r->line--, fail(r, "conns", "connection %d from rank %d to itself", c, sd[0]);
    p->csrc[c] = sd[0], p->cdst[c] = sd[1];
  }
  if (!ints(r, "flags", &p->nflags, 1, 0, MAXFLAGS) || !room(r, "flags", p->nflags, 2)) return 0;
  if (!(p->flag_rank = malloc(sizeof(int) * ((size_t)p->nflags + 1)))) return fail(r, "flags", "out of memory");
  for (int i = 0; i < p->nflags; i++)
    if (!intsf(r, "", "flags", &p->flag_rank[i], 1, 0, R - 1)) return 0;
  if (!ints(r, "copies", &p->nce, 1, 0, MAXFLAGS) || !room(r, "copies", p->nce, 2 * CE_INTS)) return 0;
  if (!(p->ce = malloc(sizeof(int) * (CE_INTS * (size_t)p->nce + 1)))) return fail(r, "copies", "out of memory");
  for (int i = 0; i < p->nce; i++) {
    int *c = &p->ce[CE_INTS * i];
    if (!intsf(r, "", "copies", c, CE_INTS, -1, MAXCHUNKS)) return 0;
    r->line--;
    if ((unsigned)c[0] >= (unsigned)R || (unsigned)c[3] >= (unsigned)R || (unsigned)c[1] > 2 || (unsigned)c[4] > 2 ||
        c[2] < 0 || c[5] < 0 || c[6] < 1 || c[2] > p->bufchunks[c[1]] - c[6] || c[5] > p->bufchunks[c[4]] - c[6] ||
        c[7] >= p->nce || c[2] / C != (c[2] + c[6] - 1) / C || c[5] / C != (c[5] + c[6] - 1) / C || /* in a block */
        c[8] >= p->nce || (c[8] >= 0 && c[7] >= 0)) /* nothing waits for a copy that waits */
      return fail(r, "copies", "copy %d: ranks, buffers, chunks or its flag and counter out of range", i);
    r->line++;
    p->nceflags += c[7] >= 0;
  }
  if (!ints(r, "counters", &p->ncounters, 1, 0, p->nce)) return 0;
  int after = r->line, ce_line = after - 1 - p->nce;
  /* Copy-engine flags are numbered 0, 1, ... once each, in any order. */
  char *seen = calloc((size_t)p->nceflags + 1, 1);
  if (!seen) return fail(r, "copies", "out of memory");
  for (int i = 0; i < p->nce; i++) {
    const int *c = &p->ce[CE_INTS * i];
    r->line = ce_line + i;
    const char *bad = c[8] >= p->ncounters ? "waits for a counter the plan does not have"
                      : c[7] >= p->nceflags ? "has a flag past the copies' flags"
                      : c[7] >= 0 && seen[c[7]]++ ? "shares its flag with an earlier copy" : NULL;
    if (bad) return free(seen), fail(r, "copies", "copy %d %s (flag %d of %d, counter %d of %d)", i, bad, c[7], p->nceflags,
                                     c[8], p->ncounters);
  }
  free(seen);
  r->line = after;
  if (!ints(r, "pulls", &p->pulls, 1, 0, MAXPRIM)) return 0;
  if (p->pulls && p->nce) return r->line--, fail(r, "pulls", "a plan that pulls has no copy-engine copies");
  int n;
  if (!ints(r, "kernel", &n, 1, 1, PF_MAXFILE)) return 0;
  if (n > r->end - r->s) return r->line--, fail(r, "kernel", "%d bytes, but the file holds %td more", n, r->end - r->s);
  const char *s = r->s;
  r->s += n;
  if (n && s[n - 1] != '\n') return fail(r, "kernel", "does not end a line");
  /* the kernel: libresccl's templates, then the statements as parsed */
  r->out = (Out){0};
  static const char *const prelude[] = RX_CUDA_PRELUDE;
  for (size_t i = 0; i < sizeof prelude / sizeof *prelude; i++) {
    const char *t = tpl_text(prelude[i]);
    if (!t) return free(r->out.s), fail(r, "kernel", "libresccl has no template %s", prelude[i]);
    out_puts(&r->out, t);
  }
  int ok = body(r, p, ce_line, s, (size_t)n);
  if (ok && r->out.oom) ok = fail(r, "kernel", "out of memory");
  if (!ok) return free(r->out.s), 0;
  p->src = r->out.s;
  p->blockless = 1;
  for (int i = 0; i < R; i++) p->blockless &= p->ntb[i] == 0;
  return 1;
}

int pf_parse(const char *path, const char *text, size_t n, PfSection **out, int *nout, char *err, size_t errn) {
  Rd r = {.path = path, .s = text, .end = text + n, .line = 1, .err = err, .errn = errn};
  *out = NULL, *nout = 0;
  /* The first line says what the file is, so an old plan or another file is named as such. */
  if (n < 12 || memcmp(text, "resccl-plan ", 12)) return fail(&r, "resccl-plan", "not a resccl plan file");
  long long version = 0;
  const char *d = text + 12;
  for (; d < text + n && d < text + 20 && *d >= '0' && *d <= '9'; d++) version = version * 10 + (*d - '0');
  if (d == text + 12 || d == text + n || *d != '\n') return fail(&r, "resccl-plan", "not a resccl plan file");
  if (version != RX_PLAN_VERSION)
    return fail(&r, "resccl-plan", "version %lld, not %d: compile the plan again", version, RX_PLAN_VERSION);
  /* The digest: the last line, over every byte before it. */
  if (text[n - 1] != '\n') {
    for (const char *c = text; c < text + n; c++) r.line += *c == '\n';
    return fail(&r, "digest", "the file does not end a line (cut short?)");
  }
  const char *last = text + n - 1;
  while (last > text && last[-1] != '\n') last--;
  for (const char *c = text; c < last; c++) r.line += *c == '\n';
  char want[40];
  snprintf(want, sizeof want, "digest %016" PRIx64 "\n", rx_digest(text, (size_t)(last - text)));
  if (memcmp(last, "digest ", 7)) return fail(&r, "digest", "no digest at the end of the file (cut short?)");
  if ((size_t)(text + n - last) != strlen(want) || memcmp(last, want, strlen(want)))
    return fail(&r, "digest", "does not match the file: it changed or was damaged since resccl wrote it; compile it again");
  r.end = last, r.line = 1;
  int cap = 0;
  while (r.s < r.end) {
    if (*nout == cap) {
      PfSection *o = realloc(*out, sizeof **out * (size_t)(cap = cap ? 2 * cap : 2));
      if (!o) return pf_free_all(*out, *nout), *out = NULL, *nout = 0, fail(&r, "resccl-plan", "out of memory");
      *out = o;
    }
    memset(&(*out)[*nout], 0, sizeof **out);
    if (!section(&r, &(*out)[(*nout)++])) return pf_free_all(*out, *nout), *out = NULL, *nout = 0, 0;
  }
  if (!*nout) return fail(&r, "resccl-plan", "no plan in the file");
  return 1;
}

void pf_free_all(PfSection *s, int n) {
  for (int i = 0; i < n; i++) pf_free(&s[i]);
  free(s);
}

