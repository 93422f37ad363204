/*
** test_setting.c — the settings' reader (src/setting.c): every kind, every
** unit, the ranges' edges, overflow, and texts that are not values, each
** refused with the setting's name, its text and what is wrong.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "setting.h"

#define MiB 1048576.0

/* text read as setting X under s: the value, or NAN where refused (its message in last). */
static char last[SETTING_ERR];
static double parse(const char *text, Setting s) {
  double x;
  last[0] = 0;
  return setting_parse("X", text, &s, &x, last) ? NAN : x;
}

/* text is refused under s with exactly this message. */
static void refused(const char *text, Setting s, const char *msg) {
  assert_true(isnan(parse(text, s)));
  assert_string_equal(last, msg);
}

static const Setting INT = {SET_INT, -100, 100, 0, 0}, REAL = {SET_REAL, -1e300, 1e300, 0, 0},
                     SIZE = {SET_SIZE, 0, 0x1p53, 0, 0}, DUR = {SET_DURATION, 0, 1e9, 1, 0}, BOOL = {SET_BOOL, 0, 1, 0, 0};

static void integers(void **state) {
  assert_true(parse("0", INT) == 0 && parse("-100", INT) == -100 && parse("100", INT) == 100 && parse("007", INT) == 7);
  refused("101", INT, "X=101: out of range (-100 to 100)");
  refused("-101", INT, "X=-101: out of range (-100 to 100)");
  refused("99999999999999999999", INT, "X=99999999999999999999: out of range (-100 to 100)"); /* past 2^63 */
  refused("-99999999999999999999", INT, "X=-99999999999999999999: out of range (-100 to 100)");
  Setting wide = {SET_INT, -0x1p53, 0x1p53, 0, 0};
  assert_true(parse("9007199254740992", wide) == 0x1p53);
  refused("9007199254740993", wide, "X=9007199254740993: out of range (-9007199254740992 to 9007199254740992)");
  const char *junk[] = {"", " 1", "1 ", "+1", "1.0", "1e3", "0x10", "1K", "abc", "--1", "-", "1\n"};
  for (size_t i = 0; i < sizeof junk / sizeof *junk; i++) {
    assert_true(isnan(parse(junk[i], INT)));
    assert_non_null(strstr(last, ": not an integer"));
  }
  Setting even = {SET_INT, 0, 64, 0, 2};
  assert_true(parse("64", even) == 64);
  refused("63", even, "X=63: not a multiple of 2");
}

static void reals(void **state) {
  assert_true(parse("1.5", REAL) == 1.5 && parse("-.5", REAL) == -0.5 && parse("2.", REAL) == 2 &&
              parse("1e3", REAL) == 1000 && parse("1E-3", REAL) == 1e-3 && parse("-0", REAL) == 0);
  refused("1e301", REAL, "X=1e301: out of range (-1e+300 to 1e+300)");
  refused("1e400", REAL, "X=1e400: out of range (-1e+300 to 1e+300)"); /* an infinity */
  const char *junk[] = {"nan", "NaN", "inf", "-inf", "infinity", "0x1p3", "1e", "1e+", ".", "-", "", " 1", "1 ", "1,5", "1.5.2"};
  for (size_t i = 0; i < sizeof junk / sizeof *junk; i++) {
    assert_true(isnan(parse(junk[i], REAL)));
    assert_non_null(strstr(last, ": not a number"));
  }
}

static void sizes(void **state) {
  assert_true(parse("0", SIZE) == 0 && parse("4096", SIZE) == 4096 && parse("8B", SIZE) == 8);
  const char *kib[] = {"1K", "1k", "1KB", "1kb", "1KiB", "1kib", "1 KiB", "1024", "1024b", "0.0009765625M"};
  for (size_t i = 0; i < sizeof kib / sizeof *kib; i++) assert_true(parse(kib[i], SIZE) == 1024);
  assert_true(parse("256M", SIZE) == 256 * MiB && parse("256 MiB", SIZE) == 256 * MiB && parse("2G", SIZE) == 2048 * MiB &&
              parse("3T", SIZE) == 3 * 0x1p40 && parse("1.5K", SIZE) == 1536 && parse("0.5MiB", SIZE) == MiB / 2);
  assert_true(parse("8192T", SIZE) == 0x1p53); /* the largest */
  refused("8193T", SIZE, "X=8193T: out of range (0B to 8192TiB)");
  refused("16777216T", SIZE, "X=16777216T: out of range (0B to 8192TiB)");    /* 2^64: would wrap to 0 */
  refused("4294971392G", SIZE, "X=4294971392G: out of range (0B to 8192TiB)"); /* 2^32+4096 GiB */
  refused("99999999999999999999999999", SIZE, "X=99999999999999999999999999: out of range (0B to 8192TiB)");
  Setting slot = {SET_SIZE, 4096, 0x1p30, 0, 16};
  refused("4294971392", slot, "X=4294971392: out of range (4KiB to 1GiB)"); /* 2^32 + 4096: no wrap to 4096 */
  refused("4095", slot, "X=4095: out of range (4KiB to 1GiB)");
  refused("4100", slot, "X=4100: not a multiple of 16B");
  assert_true(parse("1G", slot) == 0x1p30 && parse("4K", slot) == 4096);
  refused("1.5", SIZE, "X=1.5: not a whole number of bytes");
  refused("1.3K", SIZE, "X=1.3K: not a whole number of bytes");
  refused("0.0000000000000000001T", SIZE, "X=0.0000000000000000001T: not a whole number of bytes");
  const char *junk[] = {"", "-1", "-1K", " 1K", "1K ", "1  K", "1 ", "1X", "1Ki", "1KiBs", "1e3", ".5K", "1.K", "K", "0x10",
                        "1BiB", "1iB", "nan", "inf"};
  for (size_t i = 0; i < sizeof junk / sizeof *junk; i++) {
    assert_true(isnan(parse(junk[i], SIZE)));
    assert_non_null(strstr(last, ": not a size (examples: 64, 64K, 1MiB, 2G)"));
  }
  Setting mib = {SET_SIZE, 1, 0x1p50, MiB, 0}; /* a bare number counts MiB */
  assert_true(parse("64", mib) == 64 * MiB && parse("0.5", mib) == MiB / 2 && parse("1G", mib) == 1024 * MiB &&
              parse("100B", mib) == 100);
  refused("1e20", mib, "X=1e20: not a size (examples: 64, 64K, 1MiB, 2G; 64 means 64MiB)");
  refused("99999999999", mib, "X=99999999999: out of range (1B to 1024TiB)");
  refused("0", mib, "X=0: out of range (1B to 1024TiB)");
}

static void durations(void **state) {
  assert_true(parse("30", DUR) == 30 && parse("30s", DUR) == 30 && parse("500ms", DUR) == 0.5 && parse("2m", DUR) == 120 &&
              parse("1h", DUR) == 3600 && parse("1.5 s", DUR) == 1.5 && parse("1e9", DUR) == 1e9 && parse("0", DUR) == 0);
  refused("1000000001", DUR, "X=1000000001: out of range (0s to 1e+09s)");
  refused("1e400", DUR, "X=1e400: out of range (0s to 1e+09s)");
  refused("1e9h", DUR, "X=1e9h: out of range (0s to 1e+09s)");
  const char *junk[] = {"abc", "1m ", " 1", "", "-1", "-1s", "1x", "1 ", "1  s", "1S", "1sec", "1min", "nan", "inf", "1ms5"};
  for (size_t i = 0; i < sizeof junk / sizeof *junk; i++) {
    assert_true(isnan(parse(junk[i], DUR)));
    assert_non_null(strstr(last, ": not a duration (examples: 30, 30s, 500ms, 2m)"));
  }
  refused("abc", DUR, "X=abc: not a duration (examples: 30, 30s, 500ms, 2m)");
  Setting ms = {SET_DURATION, 0.001, 10, 0.001, 0}; /* a bare number counts ms */
  assert_true(parse("250", ms) == 0.25 && parse("2s", ms) == 2);
  refused("0", ms, "X=0: out of range (1ms to 10s)");
  refused("x", ms, "X=x: not a duration (examples: 30, 30s, 500ms, 2m; 30 means 30ms)");
}

static void booleans(void **state) {
  const char *yes[] = {"1", "true", "TRUE", "yes", "Yes", "on", "ON"}, *no[] = {"0", "false", "no", "off", "Off"};
  for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) assert_true(parse(yes[i], BOOL) == 1);
  for (size_t i = 0; i < sizeof no / sizeof *no; i++) assert_true(parse(no[i], BOOL) == 0);
  refused("2", BOOL, "X=2: not a boolean (1/0, true/false, yes/no, on/off)");
  refused("", BOOL, "X=: not a boolean (1/0, true/false, yes/no, on/off)");
  refused("y", BOOL, "X=y: not a boolean (1/0, true/false, yes/no, on/off)");
  refused(" 1", BOOL, "X= 1: not a boolean (1/0, true/false, yes/no, on/off)");
}

/* Messages: an option is written `-b text`; what cannot be shown is '?', and long texts are cut. */
static void messages(void **state) {
  Setting s = SIZE;
  double x;
  char err[SETTING_ERR];
  assert_int_equal(setting_parse("-b", "1X", &s, &x, err), -1);
  assert_string_equal(err, "-b 1X: not a size (examples: 64, 64K, 1MiB, 2G)");
  refused("1\033[2J", INT, "X=1?[2J: not an integer");
  char longer[300];
  memset(longer, '7', sizeof longer - 1), longer[sizeof longer - 1] = 0;
  refused(longer, INT, "X=7777777777777777777777777777777777777777...: out of range (-100 to 100)");
  /* setting_check: a value from elsewhere, shown as its kind reads */
  assert_int_equal(setting_check("RESCCL_SLOT_BYTES", 5000, &(Setting){SET_SIZE, 4096, 0x1p30, 0, 16}, err), -1);
  assert_string_equal(err, "RESCCL_SLOT_BYTES=5000B: not a multiple of 16B");
  assert_int_equal(setting_check("RESCCL_TIMEOUT", 2e9, &DUR, err), -1);
  assert_string_equal(err, "RESCCL_TIMEOUT=2e+09s: out of range (0s to 1e+09s)");
  assert_int_equal(setting_check("RESCCL_THREADS", 512, &(Setting){SET_INT, 0, 1024, 0, 32}, err), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(integers), cmocka_unit_test(reals),    cmocka_unit_test(sizes),
      cmocka_unit_test(durations), cmocka_unit_test(booleans), cmocka_unit_test(messages),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
