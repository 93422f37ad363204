/*
** fuzz_plan.c — libFuzzer target for libresccl's plan-file reader
** (src/runtime/planfile.c), which takes files that resccl did not
** necessarily write. The first byte chooses how the rest is read: odd,
** with its digest line made anew (so that mutations reach the header and
** kernel checks behind the digest), even, as it is. A failure is a crash or
** memory error (ASan, UBSan), a hang, a refusal whose message does not start
** "fuzz.plan:LINE: ", or a section read back whose numbers break what the
** reader promises the runtime.
*/
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "../planfile.h"
#include "../../kernels-templates/cuda_abi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int seal = data[0] & 1;
  const char *in = (const char *)data + 1;
  size_t n = size - 1;
  char *text = malloc(n + 40);
  memcpy(text, in, n);
  if (seal) { /* drop a last line that is a digest, then write the right one */
    size_t last = n;
    while (last > 0 && text[last - 1] != '\n') last--;
    if (n - last >= 7 && !memcmp(text + last, "digest ", 7)) n = last;
    else if (n && text[n - 1] != '\n') text[n++] = '\n';
    n += (size_t)snprintf(text + n, 40, "digest %016" PRIx64 "\n", rx_digest(text, n));
  }
  PfSection *s;
  int ns;
  char err[1024];
  if (!pf_parse("fuzz.plan", text, n, &s, &ns, err, sizeof err)) {
    int line;
    if (sscanf(err, "fuzz.plan:%d: ", &line) != 1 || line < 1) {
      fprintf(stderr, "not a diagnosis: %s\n", err);
      abort();
    }
    if (s || ns) abort();
  } else {
    for (int i = 0; i < ns; i++) {
      const PfSection *p = &s[i];
      int ok = ns >= 1 && p->src && p->nranks >= 1 && p->nranks <= RX_MAXRANKS && p->chunks >= 1 && p->maxcnt >= 1 &&
               p->maxcnt <= p->chunks && rx_name_ok(p->name, strlen(p->name)) && p->nceflags <= p->nce && p->ncounters <= p->nce;
      for (int r = 0; ok && r < p->nranks; r++) ok = p->ntb[r] >= 0;
      for (int c = 0; ok && c < p->nconn; c++)
        ok = p->csrc[c] >= 0 && p->csrc[c] < p->nranks && p->cdst[c] >= 0 && p->cdst[c] < p->nranks;
      if (!ok) {
        fprintf(stderr, "section %d read back out of range\n", i);
        abort();
      }
    }
    pf_free_all(s, ns);
  }
  free(text);
  return 0;
}
