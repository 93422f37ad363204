/*
** test_planfile.c — libresccl's plan-file reader (src/runtime/planfile.c),
** no GPU and no CUDA: plans that resccl wrote are read back whole, and every
** inconsistency between a header and its kernel, every number out of range
** and every byte that is not the grammar's is refused with the file, the
** line and the field. tests/planfile.sh writes the plans into DIR:
**   test_planfile DIR
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime.h"
#include "fnv.h"
#include "../planfile.h"
#include "../wfile.h"

static const char *dir;

static char *slurp(const char *name) {
  char path[512];
  size_t n;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  char *s = wfile_read(path, 1 << 20, &n);
  assert_non_null(s);
  return s;
}

static char *splice(char *text, size_t a, size_t f, const char *to) {
  size_t n = strlen(text), t = strlen(to);
  char *s = malloc(n - f + t + 1);
  memcpy(s, text, a), memcpy(s + a, to, t), memcpy(s + a + t, text + a + f, n - a - f + 1);
  free(text);
  return s;
}

/* `text` with its first `from` replaced by `to` (which must be there); an
   edit inside a kernel's body changes its length in the header too. */
static char *edit(char *text, const char *from, const char *to) {
  char *at = strstr(text, from);
  if (!at) fail_msg("no \"%s\" in the plan", from);
  size_t a = (size_t)(at - text);
  char *k = NULL;
  for (char *c = strstr(text, "\nkernel "); c && c < at; c = strstr(c + 1, "\nkernel ")) k = c;
  long len = k ? strtol(k + 8, NULL, 10) : 0;
  char *body = k ? strchr(k + 1, '\n') + 1 : NULL;
  int inside = body && at >= body && at < body + len;
  size_t ka = k ? (size_t)(k - text) + 8 : 0;
  text = splice(text, a, strlen(from), to);
  if (inside) {
    char num[32];
    size_t kn = strcspn(text + ka, "\n");
    snprintf(num, sizeof num, "%ld", len + (long)strlen(to) - (long)strlen(from));
    text = splice(text, ka, kn, num);
  }
  return text;
}

/* The digest line made anew, as if resccl had written the edit. */
static char *reseal(char *text) {
  char *d = strstr(text, "digest ");
  while (d && strstr(d + 1, "digest ")) d = strstr(d + 1, "digest ");
  assert_non_null(d);
  *d = '\0';
  char line[40];
  snprintf(line, sizeof line, "digest %016" PRIx64 "\n", rx_digest(text, strlen(text)));
  size_t n = strlen(text);
  char *s = malloc(n + sizeof line);
  memcpy(s, text, n), strcpy(s + n, line);
  free(text);
  return s;
}

static int line_of(const char *text, const char *what) {
  const char *at = strstr(text, what);
  assert_non_null(at);
  int line = 1;
  for (const char *c = text; c < at; c++) line += *c == '\n';
  return line;
}

/* The plan is refused, at "bad.plan:LINE: FIELD: ...". */
static void refused(const char *text, size_t n, int line, const char *field, const char *also) {
  PfSection *s;
  int ns;
  char err[1024], want[128];
  assert_int_equal(pf_parse("bad.plan", text, n, &s, &ns, err, sizeof err), 0);
  assert_null(s);
  snprintf(want, sizeof want, "bad.plan:%d: %s: ", line, field);
  if (strncmp(err, want, strlen(want))) fail_msg("expected \"%s...\", got \"%s\"", want, err);
  if (also && !strstr(err, also)) fail_msg("expected \"%s\" in \"%s\"", also, err);
}

/* Edit plan `name` (from -> to), reseal it, and expect a refusal at the line
   of `at` (NULL: where `to` is). */
static void bad_at(const char *name, const char *from, const char *to, const char *at, const char *field,
                   const char *also) {
  char *t = reseal(edit(slurp(name), from, to));
  const char *where = at ? at : to;
  refused(t, strlen(t), line_of(t, where) + (where[0] == '\n'), field, also);
  free(t);
}

static void bad(const char *name, const char *from, const char *to, const char *field, const char *also) {
  bad_at(name, from, to, NULL, field, also);
}

static void good_plans_parse(void **state) {
  const char *names[] = {"allreduce.plan", "reducescatter.plan", "allgather-ce.plan", "reducescatter-ce.plan",
                         "allreduce-ce.plan", "allreduce-pull.plan", "allreduce-ring-pull.plan", "hm.plan",
                         "manual.plan", "alltoall.plan"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    char *t = slurp(names[i]), err[1024];
    PfSection *s;
    int n;
    if (!pf_parse(names[i], t, strlen(t), &s, &n, err, sizeof err)) fail_msg("%s", err);
    assert_true(n >= 1);
    for (int k = 0; k < n; k++) {
      /* the kernel: libresccl's templates, then statements only (no comment of the file) */
      assert_non_null(strstr(s[k].src, "RX_CUDA_ABI_H"));
      assert_non_null(strstr(s[k].src, "RX_PROGRAM_END"));
      assert_null(strstr(s[k].src, "sub-pipeline"));
    }
    pf_free_all(s, n), free(t);
  }
}

/* Comments never reach the kernel: one that hides code ends where C's would. */
static void comments_do_not_reach_the_kernel(void **state) {
  char *t = slurp("allreduce.plan"), err[1024];
  PfSection *a, *b;
  int na, nb;
  assert_true(pf_parse("a", t, strlen(t), &a, &na, err, sizeof err));
  char *u = reseal(edit(strdup(t), "/* sub-pipeline", "/* system(\"touch pwned\"); \\\n // */ /* sub-pipeline"));
  if (!pf_parse("b", u, strlen(u), &b, &nb, err, sizeof err)) fail_msg("%s", err);
  assert_int_equal(na, nb);
  assert_string_equal(a[0].src, b[0].src);
  assert_null(strstr(b[0].src, "pwned"));
  pf_free_all(a, na), pf_free_all(b, nb), free(t), free(u);
  /* code where a comment ended is not the grammar's */
  bad("allreduce.plan", "  RX_AT(", "  /* x */ system(\"touch pwned\"); RX_AT(", "kernel", "unexpected 's'");
  bad("allreduce.plan", "  RX_AT(", "  /* */ */ RX_AT(", "kernel", "unexpected '*'");
  bad("allreduce.plan", "  RX_AT(", "  #include <stdio.h>\n  RX_AT(", "kernel", "unexpected '#'");
  bad("allreduce.plan", "RX_PROGRAM_END", "RX_PROGRAM_END /* never ends", "kernel", "does not end");
}

static void digest_and_truncation(void **state) {
  char *t = slurp("allreduce.plan");
  size_t n = strlen(t);
  int last = line_of(t, "digest ");
  /* an edit without a new digest */
  char *u = edit(strdup(t), "tbs 2 2 2 2", "tbs 2 2 2 3");
  refused(u, strlen(u), last, "digest", "does not match");
  /* cut short, at a line or inside one */
  refused(t, n - 24, last - 1, "digest", "no digest");
  refused(t, n - 1, last, "digest", "does not end a line");
  refused(t, 0, 1, "resccl-plan", "not a resccl plan file");
  refused("#!/bin/sh\n", 10, 1, "resccl-plan", "not a resccl plan file");
  /* another version, with or without a digest */
  char *v = reseal(edit(strdup(t), "resccl-plan 9", "resccl-plan 8"));
  refused(v, strlen(v), 1, "resccl-plan", "compile the plan again");
  free(t), free(u), free(v);
}

/* The review's cases: what a header says and what its kernel does disagree. */
static void header_and_kernel_disagree(void **state) {
  /* 4 ranks of a ring: 8 connections, 2 TBs each */
  bad("allreduce.plan", "RX_RRC_PUT(0, ", "RX_RRC_PUT(70, ", "kernel", "connection 70 out of range (0..3)");
  bad("allreduce.plan", "RX_POST(0)", "RX_POST(99)", "kernel", "flag 99 out of range");
  bad("allreduce.plan", "RX_POST(2)", "RX_POST(1)", "kernel", "flag 1 is rank 3's, not rank 0's");
  bad("allreduce.plan", "RX_RRC_PUT(0, ", "RX_RRC_PUT(1, ", "kernel", "not one rank 2 receives on");
  bad("allreduce.plan", "RX_RRC_PUT(0, RX_INPUT, 0", "RX_RRC_PUT(0, RX_INPUT, 4", "kernel", "chunk 4 out of range (0..3)");
  bad("allreduce.plan", "RX_RRC_PUT(0, RX_INPUT, 0, RX_OUTPUT, 0, 1", "RX_RRC_PUT(0, RX_INPUT, 0, RX_OUTPUT, 0, 2",
      "kernel", "count 2 out of range (1..1)");
  bad("allreduce.plan", "RX_RRC_PUT(0, RX_INPUT", "RX_RRC_PUT(0, RX_SCRATCH", "kernel", "chunk 0 out of range (0..-1)");
  bad("allreduce.plan", "RX_RRC_PUT(0, RX_INPUT", "RX_RRC_PUT(0, RX_BUF", "kernel", "must be a buffer");
  bad("allreduce.plan", "RX_RRC_PUT(0, ", "RX_RRC_PUT(-1, ", "kernel", "unexpected '-'");
  bad("allreduce.plan", "RX_RRC_PUT(0, ", "RX_RRC_PUT(99999999999999999999, ", "kernel", "out of range");
  bad("allreduce.plan", "RX_RRC_PUT(", "RX_FOO(", "kernel", "\"RX_FOO\" is not a statement");
  bad("allreduce.plan", "RX_RANK_TB(0, 0, 6)", "RX_RANK_TB(0, 0, 5)", "kernel", "entries");
  bad("allreduce.plan", "RX_PROGRAM_RANK(0, 2)", "RX_PROGRAM_RANK(0, 1)", "kernel", "TBs");
  bad("allreduce.plan", "RX_PROGRAM_END", "RX_PROGRAM_END RX_AT(1);", "kernel", "after RX_PROGRAM_END");
  /* headers that make a call do nothing, or wait to the timeout */
  bad_at("allreduce.plan", "tbs 2 2 2 2", "tbs 0 0 0 0", "RX_TB(0, 0)", "kernel", "expected RX_RANK_BEGIN");
  bad_at("allreduce.plan", "tbs 2 2 2 2", "tbs 1 1 1 1", "RX_TB(0, 1)", "kernel", "expected RX_RANK_BEGIN");
  bad("allreduce.plan", "tbs 2 2 2 2", "tbs 2 2 2 -1", "tbs", "-1 out of range");
  bad("allreduce.plan", "tbs 2 2 2 2", "tbs 2 2 2", "tbs", "missing");
  bad("allreduce.plan", "bufchunks 4 4 0", "bufchunks -2147483648 4 0", "bufchunks", "out of range");
  bad("allreduce.plan", "bufchunks 4 4 0", "bufchunks 4 400 0", "bufchunks", "has 4 and 4");
  bad("allreduce.plan", "name allreduce_ring", "name allreduce ring", "name", "one word");
  bad("allreduce.plan", "name allreduce_ring", "name a*/b", "name", "one word");
  bad("allreduce.plan", "collective allreduce", "collective allreduce\001", "collective", "\"allreduce?\"");
  bad("allreduce.plan", "placement out-of-place", "placement elsewhere", "placement", "not one of");
  bad("allreduce.plan", "ranks 4", "ranks 65", "ranks", "out of range (1..64)");
  bad_at("allreduce.plan", "ranks 4", "ranks 3", "tbs ", "tbs", "more than 3 numbers");
  bad("allreduce.plan", "maxcnt 1", "maxcnt 0", "maxcnt", "out of range");
  bad("allreduce.plan", "\n1 2\n2 3\n", "\n1 1\n2 3\n", "conns", "to itself");
  bad("allreduce.plan", "\n1 2\n2 3\n", "\n1 9\n2 3\n", "conns", "9 out of range (0..3)");
  bad_at("allreduce.plan", "flags 28\n2", "flags 28\n4", "\n4\n3\n0\n", "flags", "4 out of range (0..3)");
  bad_at("allreduce.plan", "flags 28\n2", "flags 28\n1", "RX_POST(0)", "kernel", "flag 0 is rank 1's, not rank 2's");
  bad("allreduce.plan", "\nkernel ", "\nkernel 99999999", "kernel", "out of range");
  bad("allreduce.plan", "\nkernel ", "\nkernel 9", "kernel", "but the file holds");
}

/* The copy-engine and pulling forms' own numbers. */
static void copies_counters_pulls(void **state) {
  bad("reducescatter-ce.plan", "\n1 0 0 0 1 0 1 1 -1\n", "\n1 0 0 0 1 0 1 0 -1\n", "copies", "shares its flag");
  bad("reducescatter-ce.plan", "\n1 0 0 0 1 0 1 1 -1\n", "\n1 0 1 0 1 0 2 1 -1\n", "copies", "out of range");
  bad("allreduce-ce.plan", "\n1 0 0 0 1 0 1 1 -1\n", "\n1 0 0 0 1 0 1 1 0\n", "copies", "out of range");
  bad("allreduce-ce.plan", "\n1 1 1 0 1 1 1 -1 1\n", "\n1 1 1 0 1 1 1 -1 2\n", "copies", "counter 2 of 2");
  bad("allreduce-ce.plan", "copies 4", "copies 4000", "copies", "more than the rest of the file holds");
  bad("allreduce.plan", "flags 28", "flags 16000000", "flags", "more than the rest of the file holds");
  bad_at("allreduce-ce.plan", "RX_CE_POST(1)", "RX_CE_POST(0)", "\n1 1 1 0 1 1 1 -1 1\n", "copies", "never posts");
  bad("allreduce-ce.plan", "pulls 0", "pulls 1", "pulls", "copy-engine");
  bad_at("allreduce-pull.plan", "pulls 2", "pulls 0", "RX_PROGRAM_BEGIN", "kernel", "RX_PROGRAM_BEGIN: pulls");
  bad_at("allreduce-ring-pull.plan", "pulls 2", "pulls 0", "RX_PROGRAM_BEGIN", "kernel", "RX_PROGRAM_BEGIN: pulls");
  bad("allreduce-pull.plan", "RX_RRC_PULL(1,", "RX_RRC_PULL(7,", "kernel", "rank 7 out of range");
  bad("allreduce-pull.plan", "RX_RRC_PULL(1, RX_INPUT, 0, RX_INPUT, 0, RX_OUTPUT, 0, 2", "RX_RRC_PULL(1, RX_INPUT, 1, RX_INPUT, 0, RX_OUTPUT, 0, 2", "kernel", "leave the buffer");
}

/* Ranks of several processes that loaded other files, for other sizes or
   under other settings: the first that differs from rank 0, named. */
static void ranks_agree(void **state) {
  (void)state;
  char *text = slurp("allreduce.plan");
  PfAgree all[4];
  memset(all, 0, sizeof all);
  for (int r = 0; r < 4; r++) {
    all[r] = (PfAgree){fnv1a(FNV_BASIS, text, strlen(text)), 0, ~0ull, 1 << 20, 16 << 20, 0, 0, 8, 0, 1, 0, "allreduce.plan"};
  }
  char err[512] = "";
  assert_int_equal(pf_agree(all, 4, err, sizeof err), 1);
  text[strlen(text) / 2] ^= 1; /* one byte */
  all[2].hash = fnv1a(FNV_BASIS, text, strlen(text));
  snprintf(all[2].file, sizeof all[2].file, "other.plan");
  assert_int_equal(pf_agree(all, 4, err, sizeof err), 0);
  assert_non_null(strstr(err, "different plans: rank 0 allreduce.plan"));
  assert_non_null(strstr(err, "rank 2 other.plan"));
  all[2] = all[0], all[3].hi = 1 << 20;
  assert_int_equal(pf_agree(all, 4, err, sizeof err), 0);
  assert_non_null(strstr(err, "rank 3 for 0 to 1048576"));
  all[3] = all[0], all[1].nslots = 4;
  assert_int_equal(pf_agree(all, 4, err, sizeof err), 0);
  assert_non_null(strstr(err, "rank 0 and rank 1 differ in"));
  all[1] = all[0], all[1].slot_bytes = 2 << 20;
  assert_int_equal(pf_agree(all, 4, err, sizeof err), 0);
  all[1] = all[0], all[2].dtypes = 0x80; /* RESCCL_DTYPES=f32 on one rank: calls would route apart */
  assert_int_equal(pf_agree(all, 4, err, sizeof err), 0);
  assert_non_null(strstr(err, "RESCCL_DTYPES"));
  all[2] = all[0];
  assert_int_equal(pf_agree(all, 1, err, sizeof err), 1); /* one rank agrees with itself */
  free(text);
}

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: test_planfile DIR\n"), 2;
  dir = argv[1];
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(good_plans_parse),
    cmocka_unit_test(comments_do_not_reach_the_kernel),
    cmocka_unit_test(digest_and_truncation),
    cmocka_unit_test(header_and_kernel_disagree),
    cmocka_unit_test(copies_counters_pulls),
    cmocka_unit_test(ranks_agree),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
