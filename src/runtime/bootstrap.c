/*
** bootstrap.c — the rendezvous of bootstrap.h over TCP. The server is a
** thread of the process that made the id: it accepts connections until
** every rank has sent its hello and payload, checks that they agree (the
** id's tag, one count of ranks, one payload size, each rank once), then
** answers each with a status and, if all is well, the whole table. It is
** the one piece of socket code: every message is bounded, every wait has a
** deadline, every socket is non-blocking, and a fault reaches every rank
** that connected as an error naming it, never a hang.
*/
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"

#define ID_MAGIC 0x31425852u /* "RXB1" */
#define HELLO_S 10.0          /* a connection has this long to say who it is */

typedef union {
  struct sockaddr sa;
  struct sockaddr_in in;
  struct sockaddr_in6 in6;
} Addr;

/* An id's bytes. */
typedef struct {
  uint32_t magic, len; /* len: of addr */
  uint64_t tag;
  Addr addr;
} IdBody;
_Static_assert(sizeof(IdBody) <= BS_ID_BYTES, "an id holds its body");

/* What a rank sends first, then n bytes of payload. */
typedef struct {
  uint64_t tag;
  int32_t nranks, rank;
  uint32_t n, zero;
} Hello;

/* What the server answers, then (code 0) nranks * n bytes. */
typedef struct {
  int32_t code;
  char msg[252];
} Answer;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double deadline_of(double timeout_s) { return timeout_s > 0 ? now_s() + timeout_s : INFINITY; }

/* poll's timeout until the deadline: -1 for none, 0 once past. */
static int wait_ms(double deadline) {
  if (isinf(deadline)) return -1;
  double ms = ceil((deadline - now_s()) * 1e3);
  return ms <= 0 ? 0 : ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Move n bytes over non-blocking fd (out: send them, else receive) before
   the deadline: 0, ETIMEDOUT, ECONNRESET where the peer closed, or errno. */
static int io_full(int fd, void *buf, size_t n, int out, double deadline) {
  char *p = buf;
  while (n) {
    ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k > 0) {
      p += k, n -= (size_t)k;
      continue;
    }
    if (k == 0) return ECONNRESET; /* recv: the peer closed */
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    struct pollfd pf = {fd, (short)(out ? POLLOUT : POLLIN), 0};
    int r = poll(&pf, 1, wait_ms(deadline));
    if (r == 0) return ETIMEDOUT;
    if (r < 0 && errno != EINTR) return errno;
  }
  return 0;
}

static const char *addr_str(const Addr *a, char *out, size_t n) {
  char host[INET6_ADDRSTRLEN] = "?";
  int v6 = a->sa.sa_family == AF_INET6;
  inet_ntop(a->sa.sa_family, v6 ? (const void *)&a->in6.sin6_addr : (const void *)&a->in.sin_addr, host, sizeof host);
  snprintf(out, n, v6 ? "[%s]:%u" : "%s:%u", host, ntohs(v6 ? a->in6.sin6_port : a->in.sin_port));
  return out;
}

/* ------------------------------------------------------------------ server */

typedef struct {
  int lfd;
  uint64_t tag;
  double deadline;
} Server;

/* Answer fd with a (and the table where a.code is 0), within HELLO_S. */
static void answer(int fd, const Answer *a, const void *table, size_t bytes) {
  double dl = now_s() + HELLO_S;
  if (io_full(fd, (void *)a, sizeof *a, 1, dl) == 0 && a->code == 0) io_full(fd, (void *)table, bytes, 1, dl);
}

static void fault(Answer *a, resccl_result_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fault(Answer *a, resccl_result_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  a->code = code;
  vsnprintf(a->msg, sizeof a->msg, fmt, ap);
  va_end(ap);
}

static void *serve(void *arg) {
  Server s = *(Server *)arg;
  free(arg);
  Answer a = {0};
  Hello first = {0};
  int *fd = NULL, count = 0, stray = -1; /* stray: a connection to answer that holds no rank */
  char *table = NULL;
  while (a.code == 0 && (!fd || count < first.nranks)) {
    struct pollfd pf = {s.lfd, POLLIN, 0};
    int r = poll(&pf, 1, wait_ms(s.deadline));
    if (r == 0) {
      int miss = 0;
      while (fd && miss < first.nranks && fd[miss] >= 0) miss++;
      if (fd) fault(&a, resccl_timeout, "%d of %d ranks arrived in time (rank %d did not)", count, first.nranks, miss);
      else fault(&a, resccl_timeout, "no rank arrived in time");
      break;
    }
    int c = r > 0 ? accept4(s.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC) : -1;
    if (c < 0) continue; /* EINTR, or a connection that went away */
    Hello h;
    double dl = fmin(s.deadline, now_s() + HELLO_S);
    if (io_full(c, &h, sizeof h, 0, dl)) { /* not a rank: a probe, or a rank that died */
      close(c);
      continue;
    }
    if (h.tag != s.tag) { /* another round's rank: tell it, and go on with this one */
      Answer other = {0};
      fault(&other, resccl_invalid_usage, "this server runs another round (the id is stale or altered)");
      answer(c, &other, NULL, 0);
      close(c);
      continue;
    }
    if (h.nranks < 1 || h.nranks > BS_MAX_RANKS || h.rank < 0 || h.rank >= h.nranks || h.n > BS_MAX_PAYLOAD ||
        (size_t)h.nranks * h.n > BS_MAX_TABLE) {
      fault(&a, resccl_invalid_usage, "a rank sent rank %d of %d ranks and %u bytes (at most %d ranks, %u bytes, "
            "%zu in all)", (int)h.rank, (int)h.nranks, (unsigned)h.n, BS_MAX_RANKS, BS_MAX_PAYLOAD, BS_MAX_TABLE);
    } else if (!fd) {
      first = h;
      fd = malloc((size_t)h.nranks * sizeof *fd);
      table = malloc((size_t)h.nranks * h.n + 1);
      if (!fd || !table) {
        fault(&a, resccl_system_error, "out of memory for %d ranks", (int)h.nranks);
        free(fd), fd = NULL;
      }
      for (int i = 0; fd && i < h.nranks; i++) fd[i] = -1;
    } else if (h.nranks != first.nranks) {
      fault(&a, resccl_invalid_usage, "rank %d counts %d ranks, rank %d counted %d", (int)h.rank, (int)h.nranks,
            (int)first.rank, (int)first.nranks);
    } else if (h.n != first.n) {
      fault(&a, resccl_invalid_usage, "rank %d sent %u bytes, rank %d sent %u", (int)h.rank, (unsigned)h.n,
            (int)first.rank, (unsigned)first.n);
    } else if (fd[h.rank] >= 0) {
      fault(&a, resccl_invalid_usage, "two processes claim rank %d of %d", (int)h.rank, (int)h.nranks);
    }
    if (a.code) {
      stray = c;
      break;
    }
    if (io_full(c, table + (size_t)h.rank * h.n, h.n, 0, dl)) { /* died while sending: it never arrived */
      close(c);
      continue;
    }
    fd[h.rank] = c, count++;
  }
  size_t bytes = fd ? (size_t)first.nranks * first.n : 0;
  for (int i = 0; fd && i < first.nranks; i++)
    if (fd[i] >= 0) answer(fd[i], &a, table, bytes), close(fd[i]);
  if (stray >= 0) answer(stray, &a, NULL, 0), close(stray);
  close(s.lfd);
  free(fd), free(table);
  return NULL;
}

/* The address to serve on: RESCCL_SOCKET_IFNAME's (IPv4 first), else loopback. */
static resccl_result_t serve_addr(Addr *a, socklen_t *len) {
  const char *name = getenv("RESCCL_SOCKET_IFNAME");
  memset(a, 0, sizeof *a);
  if (!name || !*name) {
    a->in.sin_family = AF_INET, a->in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    *len = sizeof a->in;
    return resccl_success;
  }
  struct ifaddrs *all, *v6 = NULL, *v4 = NULL;
  if (getifaddrs(&all)) return rt_fail(resccl_system_error, "getifaddrs: %s", strerror(errno));
  for (struct ifaddrs *i = all; i; i = i->ifa_next)
    if (i->ifa_addr && !strcmp(i->ifa_name, name)) {
      if (i->ifa_addr->sa_family == AF_INET && !v4) v4 = i;
      if (i->ifa_addr->sa_family == AF_INET6 && !v6) v6 = i;
    }
  struct ifaddrs *i = v4 ? v4 : v6;
  if (i) {
    *len = i == v4 ? sizeof a->in : sizeof a->in6;
    memcpy(a, i->ifa_addr, *len);
  }
  freeifaddrs(all);
  if (!i)
    return rt_fail(resccl_invalid_argument, "RESCCL_SOCKET_IFNAME=%.64s: no interface of that name has an IP address",
                   name);
  return resccl_success;
}

resccl_result_t bs_serve(BsId *id, double timeout_s) {
  if (!id) return rt_fail(resccl_invalid_argument, "bs_serve: id is NULL");
  IdBody b = {.magic = ID_MAGIC};
  socklen_t len;
  resccl_result_t rc = serve_addr(&b.addr, &len);
  if (rc) return rc;
  if (getrandom(&b.tag, sizeof b.tag, 0) != (ssize_t)sizeof b.tag) b.tag = (uint64_t)now_s() * 1000003u ^ (uint64_t)getpid();
  int lfd = socket(b.addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (lfd < 0) return rt_fail(resccl_system_error, "rendezvous: socket: %s", strerror(errno));
  char where[64];
  if (bind(lfd, &b.addr.sa, len) || listen(lfd, SOMAXCONN) || getsockname(lfd, &b.addr.sa, &len)) {
    int err = errno;
    close(lfd);
    return rt_fail(resccl_system_error, "rendezvous: serving on %s: %s", addr_str(&b.addr, where, sizeof where),
                   strerror(err));
  }
  b.len = len;
  Server *s = malloc(sizeof *s);
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int err = s ? 0 : ENOMEM;
  if (s) *s = (Server){lfd, b.tag, deadline_of(timeout_s)}, err = pthread_create(&t, &at, serve, s);
  pthread_attr_destroy(&at);
  if (err) {
    free(s), close(lfd);
    return rt_fail(resccl_system_error, "rendezvous: its thread: %s", strerror(err));
  }
  memset(id, 0, sizeof *id);
  memcpy(id->bytes, &b, sizeof b);
  return resccl_success;
}

/* ------------------------------------------------------------------ client */

/* The id's body, checked: 0 where the bytes are not an id. */
static int id_body(const BsId *id, IdBody *b) {
  memcpy(b, id->bytes, sizeof *b);
  int fam = b->addr.sa.sa_family;
  return b->magic == ID_MAGIC &&
         ((fam == AF_INET && b->len == sizeof b->addr.in) || (fam == AF_INET6 && b->len == sizeof b->addr.in6));
}

/* Connect to a before the deadline: the socket, or -1 with rt_fail's code in *rc. */
static int dial(const Addr *a, socklen_t len, double deadline, resccl_result_t *rc) {
  char where[64];
  int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), err = 0;
  if (fd < 0) err = errno;
  else if (connect(fd, &a->sa, len) && errno != EINPROGRESS) err = errno;
  else {
    struct pollfd pf = {fd, POLLOUT, 0};
    int r;
    while ((r = poll(&pf, 1, wait_ms(deadline))) < 0 && errno == EINTR) {}
    socklen_t el = sizeof err;
    if (r == 0) err = ETIMEDOUT;
    else if (r < 0) err = errno;
    else getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
  }
  if (!err) return fd;
  if (fd >= 0) close(fd);
  addr_str(a, where, sizeof where);
  if (err == ECONNREFUSED)
    *rc = rt_fail(resccl_invalid_usage, "rendezvous at %s: no one serves it (its process ended, or its round is over: "
                  "an id serves one round)", where);
  else if (err == ETIMEDOUT) *rc = rt_fail(resccl_timeout, "rendezvous at %s: no connection in time", where);
  else *rc = rt_fail(resccl_system_error, "rendezvous at %s: %s", where, strerror(err));
  return -1;
}

resccl_result_t bs_allgather(const BsId *id, int rank, int nranks, const void *mine, size_t n, void *all,
                             double timeout_s) {
  IdBody b;
  if (!id || !id_body(id, &b)) return rt_fail(resccl_invalid_argument, "rendezvous: not a resccl unique id");
  if (nranks < 1 || nranks > BS_MAX_RANKS || rank < 0 || rank >= nranks)
    return rt_fail(resccl_invalid_argument, "rendezvous: rank %d of %d ranks (1 to %d ranks)", rank, nranks,
                   BS_MAX_RANKS);
  if (n > BS_MAX_PAYLOAD || (size_t)nranks * n > BS_MAX_TABLE || (n && (!mine || !all)))
    return rt_fail(resccl_invalid_argument, "rendezvous: %zu bytes a rank from %s to %s (at most %u, %zu in all; "
                   "neither NULL)", n, mine ? "mine" : "NULL", all ? "all" : "NULL", BS_MAX_PAYLOAD, BS_MAX_TABLE);
  double deadline = deadline_of(timeout_s);
  resccl_result_t rc = resccl_success;
  int fd = dial(&b.addr, b.len, deadline, &rc);
  if (fd < 0) return rc;
  Hello h = {b.tag, nranks, rank, (uint32_t)n, 0};
  Answer a;
  int err = io_full(fd, &h, sizeof h, 1, deadline);
  if (!err) err = io_full(fd, (void *)mine, n, 1, deadline);
  if (!err) err = io_full(fd, &a, sizeof a, 0, deadline);
  if (!err && a.code == 0) err = io_full(fd, all, (size_t)nranks * n, 0, deadline);
  close(fd);
  char where[64];
  addr_str(&b.addr, where, sizeof where);
  if (err == ETIMEDOUT)
    return rt_fail(resccl_timeout, "rendezvous at %s: rank %d of %d: no answer in %g s (RESCCL_TIMEOUT)", where, rank,
                   nranks, timeout_s);
  if (err)
    return rt_fail(resccl_system_error, "rendezvous at %s: rank %d of %d: %s", where, rank, nranks,
                   err == ECONNRESET ? "its server closed the connection" : strerror(err));
  if (a.code) {
    a.msg[sizeof a.msg - 1] = 0;
    return rt_fail(a.code > 0 && a.code < resccl_num_results ? (resccl_result_t)a.code : resccl_internal_error,
                   "rendezvous at %s: rank %d of %d: %s", where, rank, nranks, a.msg);
  }
  return resccl_success;
}
