/* The string interner (intern.h). */
#include "common/intern.h"

#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603u;       /* FNV-1a: short strings, no dependency */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

void cham_intern_init(cham_intern_t *t)
{
    memset(t, 0, sizeof *t);
}

void cham_intern_free(cham_intern_t *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->names[i]);
    free(t->names);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

/* The slot holding s, or the empty slot where it would go. */
static size_t probe(const cham_intern_t *t, const char *s)
{
    size_t k = hash(s) & (t->n_slots - 1);
    while (t->slots[k] && strcmp(t->names[t->slots[k] - 1], s) != 0)
        k = (k + 1) & (t->n_slots - 1);
    return k;
}

static int rehash(cham_intern_t *t)
{
    size_t n_slots = t->n_slots ? 2 * t->n_slots : 64;
    uint32_t *slots = calloc(n_slots, sizeof *slots);
    if (!slots)
        return -1;
    free(t->slots);
    t->slots = slots;
    t->n_slots = n_slots;
    for (size_t i = 0; i < t->n; i++)
        t->slots[probe(t, t->names[i])] = (uint32_t)i + 1;
    return 0;
}

uint32_t cham_intern_find(const cham_intern_t *t, const char *s)
{
    if (!t->n_slots)
        return UINT32_MAX;
    size_t k = probe(t, s);
    return t->slots[k] ? t->slots[k] - 1 : UINT32_MAX;
}

uint32_t cham_intern_add(cham_intern_t *t, const char *s)
{
    uint32_t found = cham_intern_find(t, s);
    if (found != UINT32_MAX)
        return found;
    if (t->n + 1 >= UINT32_MAX || (2 * (t->n + 1) > t->n_slots && rehash(t) != 0))
        return UINT32_MAX;
    char **names = cham_grow(t->names, &t->cap, t->n + 1, sizeof *names, 64);
    if (!names)
        return UINT32_MAX;
    t->names = names;
    char *copy = strdup(s);
    if (!copy)
        return UINT32_MAX;
    t->names[t->n] = copy;
    t->slots[probe(t, s)] = (uint32_t)t->n + 1;
    return (uint32_t)t->n++;
}

const char *cham_intern_name(const cham_intern_t *t, uint32_t i)
{
    return i < t->n ? t->names[i] : NULL;
}
