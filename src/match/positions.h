/* Capuchin-style identification of policy items (docs/baselines.md): an
 * item is the i-th tensor of the op at index k of the step, as in the
 * profiled step. No features, no tolerance: when the op at k is another op,
 * has fewer tensors, or the tensor has another size, the policy no longer
 * names anything and the step fails, as the paper reports Capuchin does. */
#ifndef CHAM_MATCH_POSITIONS_H
#define CHAM_MATCH_POSITIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/policy.h"
#include "chameleon/profile.h"

#define CHAM_POSITION_NONE UINT32_MAX

/* Invariant: entries of op k are [first[k], first[k + 1]), in item order. */
typedef struct cham_positions {
    size_t n_ops;
    cham_op_token_t *token;      /* n_ops: the profiled op at each index */
    uint32_t *first;             /* n_ops + 1 */
    uint32_t *pos, *item;        /* per entry: tensor position in the op, item */
    size_t n_items;
    bool *seen;                  /* per item: taken this step */
    uint64_t hits;               /* items taken this step */
} cham_positions_t;

/* The index of a policy planned from profile. false when the host is out
 * of memory (p is then empty). */
bool cham_positions_build(cham_positions_t *p, const cham_policy_t *policy,
                          const cham_profile_t *profile);
void cham_positions_free(cham_positions_t *p);

/* The entries of op k (none past the profiled step's end). */
static inline void cham_positions_of_op(const cham_positions_t *p, uint32_t k, uint32_t *lo,
                                        uint32_t *hi)
{
    *lo = k < p->n_ops ? p->first[k] : 0;
    *hi = k < p->n_ops ? p->first[k + 1] : 0;
}

/* The item at (op k, position pos), or CHAM_POSITION_NONE. */
uint32_t cham_positions_item(const cham_positions_t *p, uint32_t k, uint32_t pos);

/* A new step: no item taken yet. */
void cham_positions_step_start(cham_positions_t *p);

/* The item at (op k, position pos), taken for this step (seen, counted in
 * hits), or CHAM_POSITION_NONE. */
uint32_t cham_positions_take(cham_positions_t *p, uint32_t k, uint32_t pos);

#endif
