/* A string interner: gives each distinct string a small index (0, 1, ...
 * in order of first appearance) and keeps a copy of it. Used for operator
 * names (op tokens) and for task labels in hazard reports. */
#ifndef CHAM_COMMON_INTERN_H
#define CHAM_COMMON_INTERN_H

#include <stddef.h>
#include <stdint.h>

/* Invariant: slots is an open-addressing table (linear probing) holding
 * index + 1 of every name, 0 for an empty slot, at most half full. */
typedef struct cham_intern {
    char **names;
    size_t n, cap;
    uint32_t *slots;
    size_t n_slots;
} cham_intern_t;

void cham_intern_init(cham_intern_t *t);
void cham_intern_free(cham_intern_t *t);
/* The index of s, added if new; UINT32_MAX when the host is out of memory. */
uint32_t cham_intern_add(cham_intern_t *t, const char *s);
/* The index of s, or UINT32_MAX if it was never added. */
uint32_t cham_intern_find(const cham_intern_t *t, const char *s);
/* The string of index i, or NULL past the end. */
const char *cham_intern_name(const cham_intern_t *t, uint32_t i);

#endif
