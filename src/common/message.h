/* Error messages into a caller's buffer: the one printf-style helper behind
 * every "char *err, size_t err_size" parameter. */
#ifndef CHAM_COMMON_MESSAGE_H
#define CHAM_COMMON_MESSAGE_H

#include <stdarg.h>
#include <stddef.h>

#if defined(__GNUC__)
#define CHAM_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CHAM_PRINTF(f, a)
#endif

/* Formats into err (cut to err_size); does nothing when err is NULL or
 * err_size is 0. */
void cham_set_err(char *err, size_t err_size, const char *fmt, ...) CHAM_PRINTF(3, 4);

/* Copies src (NULL: "") into dst, cut to size - 1 bytes; dst is always
 * terminated. For names copied on hot paths, where snprintf's formatting
 * machinery costs more than the copy. size > 0. */
void cham_copy_str(char *dst, size_t size, const char *src);

/* Copies src into dst as one line of text: a newline becomes \n, a
 * carriage return \r, a tab \t, any other control character or DEL
 * \xHH; the rest (backslashes too: a message escaped twice, a log line
 * quoting an error, reads the same) is copied as it is. Cut to size - 1
 * bytes, never inside an escape; dst is always terminated. Log lines and
 * error messages pass through it because they quote the caller's strings
 * (tensor labels, op names): printed raw, a newline in a label would forge
 * a line of its own. size > 0. */
void cham_escape_line(char *dst, size_t size, const char *src);

/* Formats fmt with ap into dst as one escaped line (cham_escape_line; the
 * formatted text cut to 1023 bytes first). size > 0. */
void cham_format_line(char *dst, size_t size, const char *fmt, va_list ap);

#endif
