/*
** wfile.c — a file written whole or not at all (wfile.h).
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wfile.h"

int wfile_write(const char *path, const void *data, size_t n, mode_t mode) {
  size_t len = strlen(path);
  char *tmp = malloc(len + sizeof ".XXXXXX");
  if (!tmp) return ENOMEM;
  memcpy(tmp, path, len);
  memcpy(tmp + len, ".XXXXXX", sizeof ".XXXXXX");
  int fd = mkstemp(tmp), err = fd < 0 ? errno : 0;
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
