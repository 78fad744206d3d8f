/* The library's own messages (cham_set_output): one line each, to the
 * registered output or to stderr. */
#ifndef CHAM_COMMON_OUTPUT_H
#define CHAM_COMMON_OUTPUT_H

#include "common/message.h"

/* Formats one line and hands it to the output cham_set_output registered,
 * or prints "chameleon: LINE" on stderr. The line is escaped
 * (cham_escape_line): it quotes callers' strings. */
void cham_output(const char *fmt, ...) CHAM_PRINTF(1, 2);

/* The same for a line already formatted and escaped. */
void cham_output_line(const char *line);

#endif
