/* HyperOffload as a planner (HyperOffload / SuperNode, 2025;
 * docs/hyperoffload.md).
 *
 * HyperOffload is a compiler pass: it puts remote-memory traffic into the
 * graph as cache operators and then orders them. For each tensor idle
 * between two uses it may insert a Store (copy to host after the last use
 * before the gap), a Detach (give up the device copy: its block goes back
 * to the allocator, reused behind an event on the Store; the cost model
 * waits for the Store there) and a Prefetch
 * (copy back, issued before a chosen op, waited for by the first use after
 * the gap). Activations between forward and backward, optimizer state
 * between updates and, for inference, KV caches and weights between decode
 * steps are all such tensors (persistent ones away across the step's end).
 *
 * Placement is its Algorithm 1, "graph-driven execution-order
 * optimization": starting from a valid order, each cache operator in turn
 * is tried at its feasible positions and put where a cost of latency and
 * memory is least. Every candidate order is timed by a simulation of three
 * streams (compute, host-to-device, device-to-host, each in order) over the
 * profile's op costs. The cost compares, in this order: the bytes above
 * the usable memory, the simulated step, the peak, the bytes-time spent
 * away (more is better). Since an operator's current position is always
 * among its candidates, refinement never makes the first two worse.
 *
 * Which tensors get cache operators is HyperOffload's compile-time lifetime
 * analysis ("short-lived tensors are not offloaded"); we decide it with the
 * same cost: a tensor is offloaded when its best placement beats leaving
 * it resident. Memory is planned against the config's capacity, as every
 * planner here; with memory to spare, only what the link hides moves.
 *
 * HyperOffload plans one static graph: the runtime plans from one steady
 * step and plans again when the op sequence changes. */
#ifndef CHAMELEON_HYPEROFFLOAD_H
#define CHAMELEON_HYPEROFFLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/policy.h"
#include "chameleon/profile.h"
#include "chameleon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cham_hyperoffload_options {
    bool activations;            /* offload activations (true) */
    bool persistent;             /* offload persistent tensors: optimizer
                                    state, parameters, KV caches (true) */
    bool refine;                 /* run Algorithm 1 over the inserted
                                    operators (true) */
    uint32_t positions;          /* positions tried per operator, spread over
                                    its feasible range, besides its current
                                    and just-in-time ones; 1..4096 (16) */
    uint32_t passes;             /* refinement passes over all operators;
                                    1..100 (1, as the paper) */
} cham_hyperoffload_options_t;

CHAM_API cham_hyperoffload_options_t cham_hyperoffload_options_default(void);

/* One placement's cost (its simulation). */
typedef struct cham_hyperoffload_cost {
    uint64_t over_bytes;         /* peak above the usable memory, 0 if it fits */
    uint64_t step_ns;            /* simulated step */
    uint64_t peak;               /* device bytes */
    double away_byte_s;          /* bytes x seconds away from the device */
} cham_hyperoffload_cost_t;

typedef struct cham_hyperoffload_result {
    size_t candidates;           /* idle tensors considered */
    size_t offloaded;            /* given cache operators */
    uint64_t offloaded_bytes;
    uint64_t ideal_ns;           /* the ops' time alone */
    uint64_t resident_peak;      /* nothing offloaded */
    cham_hyperoffload_cost_t inserted;   /* after insertion, before refinement */
    cham_hyperoffload_cost_t refined;    /* after refinement (= inserted
                                            without it) */
    size_t moved;                /* operators refinement put elsewhere */
    uint64_t evaluations;        /* simulations run */
} cham_hyperoffload_result_t;

/* Plans the profile's step on the config's device (capacity, reserve,
 * bandwidths, min_swap_bytes; op times from the profile's costs, else
 * Eq. 1). The policy's predicted peak says whether it fits the usable
 * memory; a placement that cannot fit is still returned (its over_bytes
 * says by how much), as vdnn's. Errors: CHAM_ERR_INVALID_ARG (a NULL
 * argument, a bad config or option; err names it), CHAM_ERR_HOST_OOM.
 * result may be NULL. */
CHAM_API cham_status_t cham_plan_hyperoffload(const cham_profile_t *profile,
                                              const cham_planner_config_t *config,
                                              const cham_hyperoffload_options_t *options,
                                              cham_policy_t **out,
                                              cham_hyperoffload_result_t *result, char *err,
                                              size_t err_size);

#ifdef __cplusplus
}
#endif

#endif
