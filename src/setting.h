/*
** setting.h — one strict reader for resccl's settings: the RESCCL_*
** variables of the CLI (through core.setting, l_init.c) and of libresccl
** (runtime/config.c), and the sizes the CLI and resccl-bench take. Plain C.
**
** A setting's text is an integer, a real, a size, a duration or a boolean,
** read whole: no space around it, nothing after it. Sizes are whole bytes,
** with an optional unit, K/M/G/T as powers of 1024 like NCCL's and
** nccl-tests' (KiB, KB and K are one unit; any case; one space may come
** before it, as resccl prints "256 MiB"); durations take ms, s, m or h.
** A bare size or duration counts the setting's own unit. Values are checked
** against the setting's range, overflow included; a refusal reads
** `NAME=text: what is wrong`, or `NAME text: ...` for an option (-b, --size).
*/
#ifndef RESCCL_SETTING_H
#define RESCCL_SETTING_H

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(hidden) /* never a library's export */

typedef enum { SET_INT, SET_REAL, SET_SIZE, SET_DURATION, SET_BOOL } SetKind;

typedef struct {
  SetKind kind;
  double lo, hi; /* the range, inclusive: bytes of a size, seconds of a duration; within +-2^53 */
  double unit;   /* what a bare number counts: bytes (a whole number) or seconds; 0 means 1 */
  double step;   /* the value is a multiple of it; 0: any */
} Setting;

#define SETTING_ERR 256 /* room for a message */

/* Read text, the value of setting `name`, into *out (a boolean as 0 or 1):
   0, or -1 with the message in err. */
int setting_parse(const char *name, const char *text, const Setting *s, double *out, char *err);

/* Whether x, a value of setting `name` that came from elsewhere than its
   text, is in s's range and a multiple of its step: 0, or -1 with the
   message in err. */
int setting_check(const char *name, double x, const Setting *s, char *err);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif
