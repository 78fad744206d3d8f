/* Internals of the HyperOffload planner (chameleon/hyperoffload.h):
 * ho_sim.c times one placement of the cache operators, hyperoffload.c
 * inserts them, refines their order (Algorithm 1) and writes the policy.
 * docs/hyperoffload.md. */
#ifndef CHAM_POLICY_HYPEROFFLOAD_IMPL_H
#define CHAM_POLICY_HYPEROFFLOAD_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/hyperoffload.h"

/* One idle tensor and its cache operators. Ops are profile indices:
 *   Store    after op s (its last use before the gap),
 *   Detach   before op f (the device copy is gone from then on; the cost
 *            model makes the compute stream wait for the Store there, the
 *            runtime makes whoever reuses the block wait),
 *   Prefetch before op q (issued when op q is reached),
 *   use      at op u, which waits for the Prefetch.
 * Not wrapping: s < f < q <= u. Wrapping (a persistent tensor away across
 * the step's end): q <= u <= s < f <= n_ops, f = n_ops meaning the step's
 * end. */
typedef struct ho_item {
    uint32_t tensor;             /* index into the planner's idle tensors */
    uint64_t bytes;
    uint64_t out_ns, in_ns;      /* the Store's and the Prefetch's copy time */
    uint32_t s, f, q, u;
    bool wraps;
    bool active;                 /* has its cache operators */
} ho_item_t;

/* The timeline of the last evaluation and its scratch. */
typedef struct ho_sim {
    size_t n_ops;
    const uint64_t *op_ns;       /* n_ops */
    const uint64_t *curve;       /* 2 n_ops samples: memory without offload */
    uint64_t usable;
    ho_item_t *items;
    size_t n_items;
    uint64_t evaluations;
    /* Filled by ho_eval: */
    uint64_t *start;             /* n_ops + 1: each op's start, then the step's end */
    uint64_t *store_done;        /* per item: its Store's completion */
    uint64_t *in_done;           /* per item: its Prefetch's completion */
    /* Scratch: */
    uint32_t *head, *next;       /* bucket lists per op (4 kinds) */
    int64_t *delta;              /* 2 n_ops + 1 */
} ho_sim_t;

bool ho_sim_init(ho_sim_t *s, size_t n_ops, const uint64_t *op_ns, const uint64_t *curve,
                 uint64_t usable, ho_item_t *items, size_t n_items);
void ho_sim_free(ho_sim_t *s);
/* Simulates the active items' operators over the ops: *cost, start[],
 * store_done[] and in_done[]. */
void ho_eval(ho_sim_t *s, cham_hyperoffload_cost_t *cost);
/* a < b in the planner's order: over, step, peak, then more away first. */
bool ho_better(const cham_hyperoffload_cost_t *a, const cham_hyperoffload_cost_t *b);

#endif
