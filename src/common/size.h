/* Byte sizes written by people: the one parser behind every size in a
 * config file (docs/config.md, "Value types") and on the command line
 * (docs/cli.md, "Values"), so "1.5GiB" means the same everywhere. */
#ifndef CHAM_COMMON_SIZE_H
#define CHAM_COMMON_SIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parses "4096", "64GiB", "64 GiB", "1.5GiB", "6.85MiB", "2GB": digits,
 * an optional fraction, optional spaces, an optional unit. Binary units
 * B, KiB, MiB, GiB, TiB, PiB, EiB (powers of 1024) and decimal units KB,
 * MB, GB, TB, PB, EB (powers of 1000), case ignored. No unit means bytes.
 * A fraction needs a unit larger than a byte and is rounded to the
 * nearest byte. *unit (when not NULL) says whether a unit was written.
 * On failure writes why to why (without the value) and returns false. */
bool cham_size_parse(const char *s, uint64_t *out, bool *unit, char *why, size_t why_size);

/* Writes n for people into buf and returns buf: "1.50 GiB", "20.00 MiB",
 * "512 B" (binary units up to TiB, two decimals). */
const char *cham_size_format(char *buf, size_t size, uint64_t n);

#endif
