/* The policy container, shared by the planners (which build policies) and
 * the JSON reader and writer. */
#ifndef CHAM_POLICY_IMPL_H
#define CHAM_POLICY_IMPL_H

#include <stdbool.h>

#include "chameleon/policy.h"

/* Invariants: items are in swap-out order (swap_out_op non-decreasing);
 * for every item swap_out_op < free_op <= swap_in_op <= use_op (free_op may
 * equal swap_in_op only when the block is freed and retaken at one op) and
 * swap_out_op <= swap_out_done_op; layers tile the ops [0, n_ops) in order. */
struct cham_policy {
    char planner[32];
    cham_policy_item_t *items;
    size_t n_items, cap_items;
    cham_logical_layer_t *layers;
    size_t n_layers, cap_layers;
    uint64_t capacity, usable, peak_without_swaps, predicted_peak;
    uint64_t step_ns, predicted_step_ns, predicted_carry_ns;
    uint64_t comm_wait_ns;       /* the replay's waits for collectives */
    size_t n_ops;
};

/* An empty policy of the named planner; NULL when the host is out of memory. */
cham_policy_t *cham_policy_new(const char *planner);
/* Appends; false when the host is out of memory. */
bool cham_policy_add_item(cham_policy_t *p, const cham_policy_item_t *item);
bool cham_policy_add_layer(cham_policy_t *p, const cham_logical_layer_t *layer);

#endif
