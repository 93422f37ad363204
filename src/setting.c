/*
** setting.c — strict reading of settings (setting.h). Every kind reads its
** text into a double; what overflows reads as an infinity, which the range
** check then refuses, so that nothing wraps around.
*/
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "setting.h"

#define MAX_EXACT 9007199254740992.0 /* 2^53: larger integers are not all doubles */

static int digit(char c) { return c >= '0' && c <= '9'; }

/* The text as a message shows it: at most 40 bytes, anything but printable ASCII as '?'. */
static const char *shown(const char *text, char buf[48]) {
  size_t n = 0;
  for (; text[n] && n < 40; n++) buf[n] = text[n] >= ' ' && text[n] <= '~' ? text[n] : '?';
  strcpy(buf + n, text[n] ? "..." : "");
  return buf;
}

/* A value of kind k as a message shows it, readable back as one. */
static const char *format(SetKind k, double x, char buf[48]) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int n = 0;
  if (k == SET_SIZE && x > 0)
    while (n < 4 && fmod(x, ldexp(1, 10 * (n + 1))) == 0) n++;
  if (k == SET_SIZE) snprintf(buf, 48, "%.0f%s", ldexp(x, -10 * n), unit[n]);
  else if (k == SET_DURATION && x > 0 && x < 1) snprintf(buf, 48, "%gms", x * 1e3);
  else if (k == SET_DURATION) snprintf(buf, 48, "%gs", x);
  else snprintf(buf, 48, k == SET_REAL ? "%g" : "%.0f", x);
  return buf;
}

static int refuse(char *err, const char *name, const char *value, const char *fmt, ...) {
  int n = snprintf(err, SETTING_ERR, name[0] == '-' ? "%s %s: " : "%s=%s: ", name, value);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && n < SETTING_ERR) vsnprintf(err + n, SETTING_ERR - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

/* x against s's range and step; value is x as the message shows it. */
static int check(const char *name, const char *value, double x, const Setting *s, char *err) {
  char lo[48], hi[48];
  if (!(x >= s->lo && x <= s->hi))
    return refuse(err, name, value, "out of range (%s to %s)", format(s->kind, s->lo, lo), format(s->kind, s->hi, hi));
  if (s->step > 0 && fmod(x, s->step) != 0) return refuse(err, name, value, "not a multiple of %s", format(s->kind, s->step, lo));
  return 0;
}

/* The end of the decimal number at p (digits with a point and an exponent
   where `real`, a minus sign where `sign`), or NULL where there is none. */
static const char *number_end(const char *p, int real, int sign) {
  const char *q = p + (sign && *p == '-'), *d = q;
  while (digit(*q)) q++;
  size_t nd = (size_t)(q - d);
  if (real && *q == '.') {
    const char *f = ++q;
    while (digit(*q)) q++;
    nd += (size_t)(q - f);
  }
  if (nd == 0) return NULL;
  if (real && (*q == 'e' || *q == 'E')) {
    const char *e = q + 1 + (q[1] == '+' || q[1] == '-'), *ed = e;
    while (digit(*e)) e++;
    if (e > ed) q = e;
  }
  return q;
}

/* A real, or an integer where !real: -1 where text is not one. */
static int read_number(const char *text, int real, int sign, double *x) {
  const char *end = number_end(text, real, sign);
  if (!end || *end) return -1;
  if (real) {
    *x = strtod(text, NULL); /* what overflows is an infinity; what underflows, 0 or tiny */
    return 0;
  }
  errno = 0;
  long long n = strtoll(text, NULL, 10);
  int over = errno == ERANGE || n > (long long)MAX_EXACT || n < -(long long)MAX_EXACT; /* past every range */
  *x = over ? (n < 0 ? -INFINITY : INFINITY) : (double)n;
  return 0;
}

/* A duration: a number of ms, s, m or h, or of `unit` seconds where bare. */
static int read_duration(const char *text, double unit, double *x) {
  static const struct { const char *name; double secs; } units[] = {{"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}};
  const char *end = number_end(text, 1, 0);
  if (!end) return -1;
  double mul = *end ? 0 : unit;
  const char *u = end + (*end == ' ' && end[1]);
  for (size_t i = 0; i < sizeof units / sizeof *units && *end; i++)
    if (!strcmp(u, units[i].name)) mul = units[i].secs;
  if (mul == 0) return -1;
  *x = strtod(text, NULL) * mul;
  return 0;
}

/* A size: whole bytes, counted exactly. -1 where text is not a size, -2
   where it is not whole bytes. */
static int read_size(const char *text, double unit, double *x) {
  typedef unsigned __int128 u128;
  const char *p = text;
  u128 whole = 0, frac = 0, scale = 1;
  if (!digit(*p)) return -1;
  for (; digit(*p); p++) whole = whole < ((u128)1 << 64) ? whole * 10 + (u128)(*p - '0') : whole;
  if (*p == '.') {
    const char *f = ++p, *last = p; /* last: after the last nonzero digit */
    while (digit(*p))
      if (*p++ != '0') last = p;
    if (p == f) return -1;
    if (last - f > 18) return -2; /* past 10^-18: not whole bytes in any unit */
    for (; f < last; f++) frac = frac * 10 + (u128)(*f - '0'), scale *= 10;
  }
  u128 mul = (u128)unit;
  if (*p) {
    static const char units[] = "bkmgt";
    const char *u = p + (*p == ' ' && p[1]), *at = strchr(units, *u | 0x20);
    if (!*u || !at) return -1;
    mul = (u128)1 << (10 * (at - units));
    u++;
    if (at > units && (*u | 0x20) == 'i' && (u[1] | 0x20) == 'b') u += 2;
    else if (at > units && (*u | 0x20) == 'b') u++;
    if (*u) return -1;
  }
  if (frac * mul % scale) return -2;
  u128 n = whole * mul + frac * mul / scale; /* whole < 2^65, mul <= 2^53: no wrap */
  *x = n > (u128)MAX_EXACT ? INFINITY : (double)n;
  return 0;
}

/* A boolean: 1, true, yes, on or 0, false, no, off, in any case. */
static int read_bool(const char *text, double *x) {
  static const char *const names[] = {"0", "false", "no", "off", "1", "true", "yes", "on"};
  for (int i = 0; i < 8; i++)
    if (!strcasecmp(text, names[i])) return *x = i >= 4, 0;
  return -1;
}

int setting_parse(const char *name, const char *text, const Setting *s, double *out, char *err) {
  double x = 0, unit = s->unit > 0 ? s->unit : 1;
  char value[48], eg[48];
  int rc = s->kind == SET_INT        ? read_number(text, 0, 1, &x)
           : s->kind == SET_REAL     ? read_number(text, 1, 1, &x)
           : s->kind == SET_SIZE     ? read_size(text, unit, &x)
           : s->kind == SET_DURATION ? read_duration(text, unit, &x)
                                     : read_bool(text, &x);
  shown(text, value);
  if (rc == -2) return refuse(err, name, value, "not a whole number of bytes");
  if (rc < 0 && s->kind == SET_SIZE)
    return refuse(err, name, value, "not a size (examples: 64, 64K, 1MiB, 2G%s%s)", unit == 1 ? "" : "; 64 means ",
                  unit == 1 ? "" : format(SET_SIZE, 64 * unit, eg));
  if (rc < 0 && s->kind == SET_DURATION)
    return refuse(err, name, value, "not a duration (examples: 30, 30s, 500ms, 2m%s%s)", unit == 1 ? "" : "; 30 means ",
                  unit == 1 ? "" : format(SET_DURATION, 30 * unit, eg));
  if (rc < 0)
    return refuse(err, name, value, s->kind == SET_INT    ? "not an integer"
                                    : s->kind == SET_REAL ? "not a number"
                                                          : "not a boolean (1/0, true/false, yes/no, on/off)");
  if (check(name, value, x, s, err)) return -1;
  *out = x;
  return 0;
}

int setting_check(const char *name, double x, const Setting *s, char *err) {
  char value[48];
  return check(name, format(s->kind, x, value), x, s, err);
}
