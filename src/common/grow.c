/* Growable arrays (grow.h). */
#include "common/grow.h"

#include <stdint.h>
#include <stdlib.h>

void *cham_grow(void *items, size_t *cap, size_t need, size_t elem, size_t min_cap)
{
    if (need <= *cap)
        return items;
    size_t c = *cap > min_cap ? *cap : min_cap;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return NULL;
        c *= 2;
    }
    if (c > SIZE_MAX / elem)
        return NULL;
    void *p = realloc(items, c * elem);
    if (p)
        *cap = c;
    return p;
}
