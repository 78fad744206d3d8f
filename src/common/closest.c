/* "Did you mean" (closest.h). */
#include "common/closest.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>

/* Optimal string alignment distance, case ignored; both strings at most 63
 * characters (longer ones are never close: SIZE_MAX). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na > 63 || nb > 63)
        return SIZE_MAX;
    size_t d[64][64];
    for (size_t i = 0; i <= na; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= nb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= na; i++) {
        for (size_t j = 1; j <= nb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            size_t best = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[na][nb];
}

void cham_closest_init(cham_closest_t *c, const char *s)
{
    *c = (cham_closest_t){.s = s, .dist = SIZE_MAX};
}

void cham_closest_offer(cham_closest_t *c, const char *candidate)
{
    size_t d = edit_distance(c->s, candidate);
    if (d < c->dist) {
        c->dist = d;
        c->best = candidate;
    }
}

const char *cham_closest_result(const cham_closest_t *c)
{
    if (!c->best)
        return NULL;
    size_t limit = strlen(c->best) / 4 > 2 ? strlen(c->best) / 4 : 2;
    return c->dist <= limit && c->dist < strlen(c->s) ? c->best : NULL;
}
