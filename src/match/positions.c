/* Capuchin-style (op index, i-th tensor) identification (positions.h). */
#include <stdlib.h>
#include <string.h>

#include "match/positions.h"

void cham_positions_free(cham_positions_t *p)
{
    free(p->token);
    free(p->first);
    free(p->pos);
    free(p->item);
    free(p->seen);
    memset(p, 0, sizeof *p);
}

bool cham_positions_build(cham_positions_t *p, const cham_policy_t *policy,
                          const cham_profile_t *profile)
{
    cham_policy_view_t pv;
    cham_profile_view_t v;
    cham_policy_get(policy, &pv);
    cham_profile_get(profile, &v);
    memset(p, 0, sizeof *p);
    size_t n = pv.n_items ? pv.n_items : 1;
    p->n_ops = v.n_ops;
    p->n_items = pv.n_items;
    p->token = malloc((v.n_ops ? v.n_ops : 1) * sizeof *p->token);
    p->first = calloc(v.n_ops + 1, sizeof *p->first);
    p->pos = malloc(n * sizeof *p->pos);
    p->item = malloc(n * sizeof *p->item);
    p->seen = calloc(n, sizeof *p->seen);
    if (!p->token || !p->first || !p->pos || !p->item || !p->seen) {
        cham_positions_free(p);
        return false;
    }
    for (size_t k = 0; k < v.n_ops; k++)
        p->token[k] = v.ops[k].token;
    /* Items are in swap-out order, so entries come out grouped by op. */
    size_t e = 0;
    for (size_t i = 0; i < pv.n_items; i++) {
        const cham_policy_item_t *it = &pv.items[i];
        const cham_profile_op_t *op = &v.ops[it->swap_out_op];
        uint32_t pos = CHAM_POSITION_NONE;
        for (uint32_t u = 0; u < op->n_uses && pos == CHAM_POSITION_NONE; u++)
            if (v.uses[op->first_use + u].storage == it->storage)
                pos = u;
        if (pos == CHAM_POSITION_NONE)
            continue;            /* cannot happen for a policy of this profile */
        p->pos[e] = pos;
        p->item[e] = (uint32_t)i;
        p->first[it->swap_out_op + 1]++;
        e++;
    }
    for (size_t k = 0; k < v.n_ops; k++)
        p->first[k + 1] += p->first[k];
    return true;
}

uint32_t cham_positions_item(const cham_positions_t *p, uint32_t k, uint32_t pos)
{
    uint32_t lo, hi;
    cham_positions_of_op(p, k, &lo, &hi);
    for (uint32_t e = lo; e < hi; e++)
        if (p->pos[e] == pos)
            return p->item[e];
    return CHAM_POSITION_NONE;
}

void cham_positions_step_start(cham_positions_t *p)
{
    if (p->n_items)
        memset(p->seen, 0, p->n_items * sizeof *p->seen);
    p->hits = 0;
}

uint32_t cham_positions_take(cham_positions_t *p, uint32_t k, uint32_t pos)
{
    uint32_t item = cham_positions_item(p, k, pos);
    if (item != CHAM_POSITION_NONE) {
        p->seen[item] = true;
        p->hits++;
    }
    return item;
}
