/* "Did you mean": the known name closest to one that was not recognised,
 * for every error message that names an unknown key, option or command.
 * Candidates are offered one by one, so callers keep their own tables. */
#ifndef CHAM_COMMON_CLOSEST_H
#define CHAM_COMMON_CLOSEST_H

#include <stddef.h>

typedef struct cham_closest {
    const char *s;               /* the name not recognised */
    const char *best;            /* the closest candidate so far */
    size_t dist;                 /* its edit distance */
} cham_closest_t;

void cham_closest_init(cham_closest_t *c, const char *s);
void cham_closest_offer(cham_closest_t *c, const char *candidate);
/* The closest candidate if it is near enough to be a likely typo: an edit
 * distance (case ignored, adjacent transpositions count one) of at most a
 * quarter of its length, at least 2, and less than s's length. Else NULL. */
const char *cham_closest_result(const cham_closest_t *c);

#endif
