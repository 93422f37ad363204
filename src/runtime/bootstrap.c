/*
** bootstrap.c — the rendezvous of bootstrap.h over TCP. The server is a
** thread of the process that made the id. Round 0 is the join: it accepts
** connections until every rank has sent its hello and payload, checks
** that they agree (the id's tag, one count of ranks, one payload size,
** each rank once), then answers each with a status and, if all is well,
** the whole table. Then it stops listening and keeps the ranks'
** connections, over which every later round comes the same way. It is the
** one piece of socket code: every message is bounded, every socket is
** non-blocking, every wait of a rank has its deadline, and a fault (a
** rank that left among them) reaches every rank still connected as an
** error naming it, never a hang.
*/
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

/* What a rank sends at each round, then n bytes of payload. */
typedef struct {
  uint64_t tag;
  int32_t nranks, rank;
  uint32_t n, round; /* round: 0 for the join */
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

/* Close fd, ending the connection even where a forked child (a data
   loader's worker) still holds a copy of it: the peer must see it end. */
static void hang_up(int fd) {
  shutdown(fd, SHUT_RDWR);
  close(fd);
}

/* fd, its small messages sent at once: a round is a hello, a payload and an
   answer, which Nagle's algorithm against delayed acknowledgements held
   40 ms each (a 2-rank init took 88 ms on loopback). */
static int no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/* ------------------------------------------------------------------ server */

/* Round 0 is the join: connections are accepted until every rank has sent
   its hello; then the listening socket closes and every later round comes
   over the ranks' own connections. A connection's hello is read once it
   has come (up to PEND wait at once, each at most HELLO_S), so that one
   that says nothing (a probe) holds no one up. */
enum { PEND = 16 };
typedef struct {
  int lfd;                 /* listening until round 0 is answered, then -1 */
  uint64_t tag;
  double deadline;         /* round 0's */
  int nranks, first;       /* from the first hello (0 before it), and the rank that sent it */
  int *fd;                 /* per rank: its connection; -1 before it joins and once it has left */
  char *waits;             /* per rank: 1 once it sent this round */
  struct pollfd *pf;       /* what poll watches: the listening socket, the ranks' (nranks + 1) */
  int *who;                /* pf[i]'s rank */
  int count;               /* ranks waiting in this round */
  int nleft, gone;         /* ranks that left, and the first of them (-1: none) */
  uint32_t round, n;       /* this round's number, and bytes a rank once its first hello came */
  int lead;                /* the rank that sent that hello (-1: none yet) */
  char *table;             /* this round's, nranks * n bytes (+1: never empty) */
  int stray;               /* a connection to answer that holds no rank, or -1 */
  int pend[PEND];          /* round 0: connections accepted whose hello has not come, or -1 */
  double pend_dl[PEND];    /* when each is dropped */
  Answer a;                /* a fault (code != 0) ends the server */
} Server;

/* Answer fd with a (and the table where a.code is 0), within HELLO_S: 0 or errno. */
static int answer(int fd, const Answer *a, const void *table, size_t bytes) {
  double dl = now_s() + HELLO_S;
  int err = io_full(fd, (void *)a, sizeof *a, 1, dl);
  return err || a->code ? err : io_full(fd, (void *)table, bytes, 1, dl);
}

static void fault(Answer *a, resccl_result_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fault(Answer *a, resccl_result_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  a->code = code;
  vsnprintf(a->msg, sizeof a->msg, fmt, ap);
  va_end(ap);
}

static void left_fault(Server *s) {
  fault(&s->a, resccl_remote_error, "rank %d left the communicator (its process ended, or it destroyed or aborted it)",
        s->gone);
}

/* Rank r's connection closed, or broke in a message: it left. The ranks
   waiting in this round can no longer have their table; later ones learn
   of it when they send theirs. */
static void leave(Server *s, int r) {
  hang_up(s->fd[r]), s->fd[r] = -1;
  if (s->waits[r]) s->waits[r] = 0, s->count--;
  if (s->gone < 0) s->gone = r;
  s->nleft++;
  if (s->count) left_fault(s);
}

/* The first hello: the ranks' arrays. */
static void join(Server *s, const Hello *h) {
  int k = h->nranks;
  s->fd = malloc((size_t)k * sizeof *s->fd), s->waits = calloc((size_t)k, 1);
  s->pf = malloc((size_t)(k + 1 + PEND) * sizeof *s->pf), s->who = malloc((size_t)(k + 1 + PEND) * sizeof *s->who);
  if (!s->fd || !s->waits || !s->pf || !s->who) {
    free(s->fd), free(s->waits), free(s->pf), free(s->who);
    s->fd = NULL, s->waits = NULL, s->pf = NULL, s->who = NULL;
    fault(&s->a, resccl_system_error, "out of memory for %d ranks", k);
    return;
  }
  for (int i = 0; i < k; i++) s->fd[i] = -1;
  s->nranks = k, s->first = h->rank;
}

/* A rank's hello and payload on c: a new connection's (r < 0, in round 0)
   or rank r's. A fault goes to s->a. */
static void take(Server *s, int c, int r) {
  Hello h;
  double dl = r < 0 ? fmin(s->deadline, now_s() + HELLO_S) : now_s() + HELLO_S;
  if (io_full(c, &h, sizeof h, 0, dl)) { /* not a rank: a probe, or a rank that died or left */
    if (r < 0) close(c);
    else leave(s, r);
    return;
  }
  if (h.tag != s->tag && r < 0) { /* another communicator's rank: tell it, and go on with this one */
    Answer other = {0};
    fault(&other, resccl_invalid_usage, "this server runs another round (the id is stale or altered)");
    answer(c, &other, NULL, 0);
    close(c);
    return;
  }
  if (h.tag != s->tag) {
    fault(&s->a, resccl_invalid_usage, "rank %d sent another communicator's tag", r);
  } else if (h.nranks < 1 || h.nranks > BS_MAX_RANKS || h.rank < 0 || h.rank >= h.nranks || h.n > BS_MAX_PAYLOAD ||
             (size_t)h.nranks * h.n > BS_MAX_TABLE) {
    fault(&s->a, resccl_invalid_usage, "a rank sent rank %d of %d ranks and %u bytes (at most %d ranks, %u bytes, "
          "%zu in all)", (int)h.rank, (int)h.nranks, (unsigned)h.n, BS_MAX_RANKS, BS_MAX_PAYLOAD, BS_MAX_TABLE);
  } else if (r >= 0 && h.rank != r) {
    fault(&s->a, resccl_invalid_usage, "rank %d's connection sent a hello of rank %d", r, (int)h.rank);
  } else if (s->nranks && h.nranks != s->nranks) {
    fault(&s->a, resccl_invalid_usage, "rank %d counts %d ranks, rank %d counted %d", (int)h.rank, (int)h.nranks,
          s->first, s->nranks);
  } else if (h.round != s->round) {
    int other = s->lead;
    for (int i = 0; other < 0 && i < s->nranks; i++)
      if (i != h.rank && s->fd[i] >= 0) other = i; /* every rank still here is at the server's round */
    if (other >= 0)
      fault(&s->a, resccl_invalid_usage, "rank %d is at round %u, rank %d at %u", (int)h.rank, (unsigned)h.round,
            other, (unsigned)s->round);
    else
      fault(&s->a, resccl_invalid_usage, "rank %d is at round %u, its server at %u", (int)h.rank, (unsigned)h.round,
            (unsigned)s->round);
  } else if (!s->nranks) {
    join(s, &h);
  } else if (r < 0 && s->fd[h.rank] >= 0) {
    fault(&s->a, resccl_invalid_usage, "two processes claim rank %d of %d", (int)h.rank, (int)h.nranks);
  } else if (s->waits[h.rank]) {
    fault(&s->a, resccl_invalid_usage, "rank %d sent round %u twice", (int)h.rank, (unsigned)h.round);
  }
  if (!s->a.code && s->nleft) left_fault(s);
  if (!s->a.code && !s->table) { /* this round's first hello */
    s->table = malloc((size_t)h.nranks * h.n + 1);
    if (!s->table) fault(&s->a, resccl_system_error, "out of memory for %d ranks of %u bytes", (int)h.nranks, h.n);
    s->n = h.n, s->lead = h.rank;
  } else if (!s->a.code && h.n != s->n) {
    fault(&s->a, resccl_invalid_usage, "rank %d sent %u bytes, rank %d sent %u", (int)h.rank, (unsigned)h.n, s->lead,
          (unsigned)s->n);
  }
  if (s->a.code) {
    if (r < 0) s->stray = c;
    return;
  }
  if (io_full(c, s->table + (size_t)h.rank * h.n, h.n, 0, dl)) { /* died while sending: it never arrived */
    if (r < 0) close(c);
    else leave(s, r);
    return;
  }
  if (r < 0) s->fd[h.rank] = c;
  s->waits[h.rank] = 1, s->count++;
}

/* Close the connections still pending at `now` past their time (INFINITY: all). */
static void drop_pending(Server *s, double now) {
  for (int j = 0; j < PEND; j++)
    if (s->pend[j] >= 0 && now >= s->pend_dl[j]) close(s->pend[j]), s->pend[j] = -1;
}

/* Every rank sent this round: each gets the table, and the next begins. */
static void next_round(Server *s) {
  Answer ok = {0};
  size_t bytes = (size_t)s->nranks * s->n;
  /* joined: no one else may, and an id used again, even at once, is refused */
  if (s->lfd >= 0) close(s->lfd), s->lfd = -1;
  drop_pending(s, INFINITY);
  s->count = 0;
  for (int i = 0; i < s->nranks; i++) {
    s->waits[i] = 0;
    if (answer(s->fd[i], &ok, s->table, bytes)) leave(s, i); /* gone, or too slow to take it: out of step */
  }
  free(s->table);
  s->table = NULL, s->lead = -1, s->round++;
}

static void *serve(void *arg) {
  Server *s = arg;
  struct pollfd lone[1 + PEND];
  int lone_who[1 + PEND];
  while (!s->a.code && !(s->nranks && s->nleft == s->nranks)) {
    if (s->nranks && s->count == s->nranks) {
      next_round(s);
      continue;
    }
    struct pollfd *pf = s->pf ? s->pf : lone;
    int *who = s->who ? s->who : lone_who, k = 0;
    double until = s->lfd >= 0 ? s->deadline : INFINITY; /* later rounds: the ranks' deadlines */
    for (int i = 0; i < s->nranks; i++)
      if (s->fd[i] >= 0) who[k] = i, pf[k++] = (struct pollfd){s->fd[i], POLLIN, 0};
    for (int j = 0; j < PEND; j++)
      if (s->pend[j] >= 0) who[k] = -2 - j, pf[k++] = (struct pollfd){s->pend[j], POLLIN, 0}, until = fmin(until, s->pend_dl[j]);
    if (s->lfd >= 0) who[k] = -1, pf[k++] = (struct pollfd){s->lfd, POLLIN, 0}; /* last: hellos that came go first */
    int r = poll(pf, (nfds_t)k, wait_ms(until));
    if (r == 0 && now_s() < s->deadline) { /* a pending connection's time is up, not the join's */
      drop_pending(s, now_s());
      continue;
    }
    if (r == 0) {
      int miss = 0;
      while (miss < s->nranks && s->waits[miss]) miss++;
      if (s->nranks)
        fault(&s->a, resccl_timeout, "%d of %d ranks arrived in time (rank %d did not)", s->count, s->nranks, miss);
      else fault(&s->a, resccl_timeout, "no rank arrived in time");
    } else if (r < 0 && errno != EINTR && errno != EAGAIN) {
      fault(&s->a, resccl_system_error, "rendezvous: poll: %s", strerror(errno));
    }
    for (int i = 0; r > 0 && i < k && !s->a.code; i++) {
      if (!pf[i].revents) continue;
      if (who[i] >= 0) {
        take(s, pf[i].fd, who[i]);
      } else if (who[i] <= -2) { /* its hello came */
        s->pend[-2 - who[i]] = -1;
        take(s, pf[i].fd, -1);
      } else if (s->lfd >= 0) {
        int c = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), j = 0;
        if (c < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM))
          poll(NULL, 0, 10); /* out of descriptors: the connection waits, and this loop must not spin */
        if (c < 0) continue;   /* else EINTR, or a connection that went away */
        while (j < PEND && s->pend[j] >= 0) j++;
        if (j == PEND) { /* full: the one that has waited longest goes */
          j = 0;
          for (int q = 1; q < PEND; q++) j = s->pend_dl[q] < s->pend_dl[j] ? q : j;
          close(s->pend[j]);
        }
        s->pend[j] = no_delay(c), s->pend_dl[j] = now_s() + HELLO_S;
      }
    }
  }
  drop_pending(s, INFINITY);
  for (int i = 0; i < s->nranks; i++) /* a fault reaches every rank still here, waiting or not */
    if (s->fd[i] >= 0) {
      if (s->a.code) answer(s->fd[i], &s->a, NULL, 0);
      hang_up(s->fd[i]);
    }
  if (s->stray >= 0) answer(s->stray, &s->a, NULL, 0), close(s->stray);
  if (s->lfd >= 0) close(s->lfd);
  free(s->fd), free(s->waits), free(s->pf), free(s->who), free(s->table), free(s);
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
  if (s) {
    *s = (Server){.lfd = lfd, .tag = b.tag, .deadline = deadline_of(timeout_s), .gone = -1, .lead = -1, .stray = -1};
    for (int j = 0; j < PEND; j++) s->pend[j] = -1;
    err = pthread_create(&t, &at, serve, s);
  }
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


/* Connect to a before the deadline: the socket, or -1 with the code in *rc
   and why in why[0..wn). */
static int dial(const Addr *a, socklen_t len, double deadline, resccl_result_t *rc, char *why, size_t wn) {
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
  if (!err) return no_delay(fd);
  if (fd >= 0) close(fd);
  if (err == ECONNREFUSED)
    *rc = resccl_remote_error, snprintf(why, wn, "no one serves it (its process ended, or its communicator began: "
                                        "an id serves one communicator)");
  else if (err == ETIMEDOUT) *rc = resccl_timeout, snprintf(why, wn, "no connection in time");
  else *rc = resccl_system_error, snprintf(why, wn, "%s", strerror(err));
  return -1;
}

/* A rank's side of the rendezvous: one connection, made at round 0. */
typedef struct {
  Exchange x; /* first: the Exchange handed out is the Client */
  IdBody b;
  double timeout_s;
  int fd;            /* -1 before round 0 and after a failed round */
  uint32_t round;    /* the next round's number */
  char why[256];     /* why a round failed, where one did: every later one fails at once */
} Client;

/* One round over c's connection: 0, or the code with why. */
static resccl_result_t client_round(Client *c, const void *mine, size_t n, void *all, char *why, size_t wn) {
  double deadline = deadline_of(c->timeout_s);
  resccl_result_t rc = resccl_success;
  if (c->fd < 0 && (c->fd = dial(&c->b.addr, c->b.len, deadline, &rc, why, wn)) < 0) return rc;
  Hello h = {c->b.tag, c->x.nranks, c->x.rank, (uint32_t)n, c->round};
  Answer a;
  int err = io_full(c->fd, &h, sizeof h, 1, deadline);
  if (!err) err = io_full(c->fd, (void *)mine, n, 1, deadline);
  if (err == EPIPE || err == ECONNRESET) { /* the server closed: it may have sent a fault first */
    if (!io_full(c->fd, &a, sizeof a, 0, now_s()) && a.code) err = 0;
  } else if (!err) {
    err = io_full(c->fd, &a, sizeof a, 0, deadline);
  }
  if (!err && a.code == 0) err = io_full(c->fd, all, (size_t)c->x.nranks * n, 0, deadline);
  if (err == ETIMEDOUT) return snprintf(why, wn, "no answer in %g s (RESCCL_TIMEOUT)", c->timeout_s), resccl_timeout;
  if (err == ECONNRESET || err == EPIPE)
    return snprintf(why, wn, "its server closed the connection"), resccl_remote_error;
  if (err) return snprintf(why, wn, "%s", strerror(err)), resccl_system_error;
  if (a.code) {
    a.msg[sizeof a.msg - 1] = 0;
    snprintf(why, wn, "%s", a.msg);
    return a.code > 0 && a.code < resccl_num_results ? (resccl_result_t)a.code : resccl_internal_error;
  }
  return resccl_success;
}

static resccl_result_t client_allgather(Exchange *x, const void *mine, size_t n, void *all) {
  Client *c = (Client *)x;
  char where[64], why[sizeof c->why];
  addr_str(&c->b.addr, where, sizeof where);
  if (c->why[0])
    return rt_fail(resccl_remote_error, "rendezvous at %s: rank %d of %d: the exchange failed earlier: %s", where,
                   x->rank, x->nranks, c->why);
  resccl_result_t rc;
  if (n > BS_MAX_PAYLOAD || (size_t)x->nranks * n > BS_MAX_TABLE || (n && (!mine || !all))) {
    rc = resccl_invalid_argument;
    snprintf(why, sizeof why, "%zu bytes a rank from %s to %s (at most %u, %zu in all; neither NULL)", n,
             mine ? "mine" : "NULL", all ? "all" : "NULL", BS_MAX_PAYLOAD, BS_MAX_TABLE);
  } else {
    rc = client_round(c, mine, n, all, why, sizeof why);
  }
  if (rc == resccl_success) {
    c->round++;
    return rc;
  }
  if (c->fd >= 0) hang_up(c->fd), c->fd = -1; /* out of step: leave, so that the others learn of it */
  memcpy(c->why, why, sizeof why);
  return rt_fail(rc, "rendezvous at %s: rank %d of %d: %s", where, x->rank, x->nranks, why);
}

static void client_close(Exchange *x) {
  Client *c = (Client *)x;
  if (!c) return;
  if (c->fd >= 0) hang_up(c->fd);
  free(c);
}

resccl_result_t bs_exchange(const BsId *id, int rank, int nranks, double timeout_s, Exchange **out) {
  IdBody b;
  if (!out) return rt_fail(resccl_invalid_argument, "rendezvous: out is NULL");
  *out = NULL;
  if (!id || !id_body(id, &b)) return rt_fail(resccl_invalid_argument, "rendezvous: not a resccl unique id");
  if (nranks < 1 || nranks > BS_MAX_RANKS || rank < 0 || rank >= nranks)
    return rt_fail(resccl_invalid_argument, "rendezvous: rank %d of %d ranks (1 to %d ranks)", rank, nranks,
                   BS_MAX_RANKS);
  Client *c = calloc(1, sizeof *c);
  if (!c) return rt_fail(resccl_system_error, "rendezvous: out of memory");
  c->x = (Exchange){rank, nranks, client_allgather, client_close};
  c->b = b, c->timeout_s = timeout_s, c->fd = -1;
  *out = &c->x;
  return resccl_success;
}
