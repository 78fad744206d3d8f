/* Error messages into a caller's buffer (message.h). */
#include "common/message.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void cham_set_err(char *err, size_t err_size, const char *fmt, ...)
{
    if (!err || err_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

void cham_copy_str(char *dst, size_t size, const char *src)
{
    size_t n = 0;
    if (src)
        while (n + 1 < size && src[n])
            n++;
    memcpy(dst, src ? src : "", n);
    dst[n] = '\0';
}
