/* The policy container (policy-impl.h) and its public view. */
#include <stdio.h>
#include <stdlib.h>

#include "common/assert.h"
#include "common/grow.h"
#include "policy/policy-impl.h"

cham_policy_t *cham_policy_new(const char *planner)
{
    cham_policy_t *p = calloc(1, sizeof *p);
    if (p)
        snprintf(p->planner, sizeof p->planner, "%s", planner ? planner : "");
    return p;
}

void cham_policy_free(cham_policy_t *p)
{
    if (!p)
        return;
    free(p->items);
    free(p->layers);
    free(p);
}

bool cham_policy_add_item(cham_policy_t *p, const cham_policy_item_t *item)
{
    cham_policy_item_t *v = cham_grow(p->items, &p->cap_items, p->n_items + 1, sizeof *v, 16);
    if (!v)
        return false;
    p->items = v;
    p->items[p->n_items++] = *item;
    return true;
}

bool cham_policy_add_layer(cham_policy_t *p, const cham_logical_layer_t *layer)
{
    cham_logical_layer_t *v = cham_grow(p->layers, &p->cap_layers, p->n_layers + 1, sizeof *v,
                                        16);
    if (!v)
        return false;
    p->layers = v;
    p->layers[p->n_layers++] = *layer;
    return true;
}

void cham_policy_get(const cham_policy_t *p, cham_policy_view_t *v)
{
    CHAM_ASSERT(p && v);
    *v = (cham_policy_view_t){
        .planner = p->planner,
        .n_items = p->n_items,
        .items = p->items,
        .n_layers = p->n_layers,
        .layers = p->layers,
        .capacity = p->capacity,
        .usable = p->usable,
        .peak_without_swaps = p->peak_without_swaps,
        .predicted_peak = p->predicted_peak,
        .step_ns = p->step_ns,
        .predicted_step_ns = p->predicted_step_ns,
        .predicted_carry_ns = p->predicted_carry_ns,
        .n_ops = p->n_ops,
    };
}
