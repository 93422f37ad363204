/*
** template.c — fill ${name} placeholders of a kernel template. An unknown or
** unterminated placeholder is an error that names the template's line; nothing
** is left unsubstituted.
*/
#include <string.h>

#include "core.h"

rcStatus tpl_fill(Buf *out, const char *tplname, const char *tpl, const TplVar *vars, int nvars, Err *e) {
  int line = 1;
  const char *s = tpl;
  while (*s) {
    const char *p = strstr(s, "${");
    const char *stop = p ? p : s + strlen(s);
    for (const char *q = s; q < stop; q++) line += *q == '\n';
    buf_add(out, s, (size_t)(stop - s));
    if (!p) break;
    const char *end = strchr(p + 2, '}'), *nl = strchr(p + 2, '\n');
    if (!end || (nl && nl < end)) return err_set(e, RC_ETEMPLATE, "%s:%d: unterminated placeholder", tplname, line);
    size_t len = (size_t)(end - p - 2);
    int k = 0;
    while (k < nvars && !(strlen(vars[k].name) == len && memcmp(vars[k].name, p + 2, len) == 0)) k++;
    if (k == nvars) return err_set(e, RC_ETEMPLATE, "%s:%d: unknown placeholder ${%.*s}", tplname, line, (int)len, p + 2);
    buf_puts(out, vars[k].value);
    s = end + 1;
  }
  return RC_OK;
}
