/* Argument parsing shared by the commands. */
#ifndef CHAM_TOOLS_ARGS_H
#define CHAM_TOOLS_ARGS_H

#include <stdbool.h>
#include <stdint.h>

/* A size: "123", "64GiB", "512 MiB" (B, KiB, MiB, GiB, TiB). false when it
 * is not one or is above 2^64 - 1. */
bool tool_parse_size(const char *s, uint64_t *out);

#endif
