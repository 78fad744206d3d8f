/* Growable arrays: the one place that enlarges a buffer by doubling. */
#ifndef CHAM_COMMON_GROW_H
#define CHAM_COMMON_GROW_H

#include <stddef.h>

/* Returns items enlarged to hold at least need elements of elem bytes
 * (capacity doubled from at least min_cap, stored in *cap), or items itself
 * when it already does; never NULL on success, even for need 0 (items NULL
 * then gets min_cap elements). Returns NULL, with items and *cap untouched,
 * when the host is out of memory or the size would overflow. */
void *cham_grow(void *items, size_t *cap, size_t need, size_t elem, size_t min_cap);

#endif
