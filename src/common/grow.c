/* Growable arrays (grow.h). */
#include "common/grow.h"

#include <stdint.h>
#include <stdlib.h>

void *cham_grow(void *items, size_t *cap, size_t need, size_t elem, size_t min_cap)
{
    /* With nothing allocated yet, even a need of 0 allocates: NULL must
     * mean failure only (a profile's first op with no uses grew uses[] by 0). */
    if (items && need <= *cap)
        return items;
    if (need == 0)
        need = 1;
    size_t c = *cap > min_cap ? *cap : min_cap > 0 ? min_cap : 1;
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
