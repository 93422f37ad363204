/*
** wfile.c — a file written whole or not at all, and one read whole (wfile.h).
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wfile.h"

/* The folders above the file at path, made where missing (as mkdir -p,
   the umask applied): 0, or errno. */
static int make_parents(char *path) {
  for (char *p = strchr(path + 1, '/'); p; p = strchr(p + 1, '/')) {
    *p = '\0';
    int err = mkdir(path, 0777) == 0 || errno == EEXIST ? 0 : errno;
    *p = '/';
    if (err) return err;
  }
  return 0;
}

int wfile_write(const char *path, const void *data, size_t n, mode_t mode) {
  size_t len = strlen(path);
  char *tmp = malloc(len + sizeof ".XXXXXX");
  if (!tmp) return ENOMEM;
  memcpy(tmp, path, len);
  memcpy(tmp + len, ".XXXXXX", sizeof ".XXXXXX");
  int fd = mkstemp(tmp), err = fd < 0 ? errno : 0;
  if (fd < 0 && err == ENOENT && !(err = make_parents(tmp))) {
    memcpy(tmp + len, ".XXXXXX", sizeof ".XXXXXX"); /* mkstemp may have changed it */
    fd = mkstemp(tmp), err = fd < 0 ? errno : 0;
  }
  if (fd >= 0) {
    fchmod(fd, mode); /* mkstemp's is private */
    FILE *f = fdopen(fd, "wb");
    if (!f) err = errno, close(fd);
    else {
      errno = 0;
      if (fwrite(data, 1, n, f) != n) err = errno ? errno : EIO;
      if (fclose(f) != 0 && !err) err = errno;
    }
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) remove(tmp);
  }
  free(tmp);
  return err;
}

char *wfile_read(const char *path, size_t max, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t len = 0, cap = 0, got;
  int err = 0;
  do {
    if (len == cap) {
      char *t = cap > max ? NULL : realloc(buf, (cap = cap ? 2 * cap : 1 << 16) + 1);
      if (!t) {
        err = cap > max ? EFBIG : ENOMEM;
        break;
      }
      buf = t;
    }
    len += got = fread(buf + len, 1, cap - len, f);
  } while (got);
  if (!err && ferror(f)) err = EIO;
  if (!err && len > max) err = EFBIG;
  fclose(f);
  if (err) return free(buf), errno = err, NULL;
  buf[len] = '\0', *n = len;
  return buf;
}
