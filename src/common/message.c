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

void cham_format_line(char *dst, size_t size, const char *fmt, va_list ap)
{
    char raw[1024];
    vsnprintf(raw, sizeof raw, fmt, ap);
    cham_escape_line(dst, size, raw);
}

void cham_escape_line(char *dst, size_t size, const char *src)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)(src ? src : ""); *p; p++) {
        char esc[5];
        size_t k;
        if (*p == '\n' || *p == '\r' || *p == '\t') {
            esc[0] = '\\';
            esc[1] = *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't';
            k = 2;
        } else if (*p < 0x20 || *p == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", *p);
            k = 4;
        } else {
            esc[0] = (char)*p;
            k = 1;
        }
        if (n + k + 1 > size)
            break;
        memcpy(dst + n, esc, k);
        n += k;
    }
    dst[n] = '\0';
}
