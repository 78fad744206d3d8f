/* SwapAdvisor as a planner (Huang et al., ASPLOS 2020; docs/swapadvisor.md).
 *
 * From a detailed profile it builds the step's dataflow graph (producers,
 * consumers, sizes, op costs) and searches, with a genetic algorithm, over
 * operator schedules (topological orders of the graph) and memory pools
 * (size classes and the number of objects in each). Each candidate is
 * scored by a dataflow simulation of three streams (compute, swap-in,
 * swap-out) running the swap plan Belady's rule makes for it: under
 * pressure in a size class, the resident tensor of that class used
 * farthest in the future leaves, and every swap-in starts as soon as its
 * memory is free. The search is the paper's; where the paper leaves a
 * choice open, docs/swapadvisor.md says what we chose.
 *
 * SwapAdvisor plans one static graph. A caller whose op sequence changes
 * between steps must search again (the runtime does, or fails with a clear
 * error: config key swapadvisor_on_change). */
#ifndef CHAMELEON_SWAPADVISOR_H
#define CHAMELEON_SWAPADVISOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/policy.h"
#include "chameleon/profile.h"
#include "chameleon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cham_swapadvisor_options {
    uint64_t seed;               /* of every random choice (1) */
    uint32_t population;         /* N_p, individuals kept per generation (24) */
    uint32_t generations;        /* generations after the first (100) */
    double search_seconds;       /* wall-clock limit of the search; the
                                    generations done by then count (10) */
    uint32_t threads;            /* evaluating in parallel; 0 = the online
                                    CPUs, at most 16 (0) */
    double mutation;             /* P, the chance a pool gene (a class step,
                                    a count) mutates (0.1) */
    double schedule_mutation;    /* P of the schedule's mutation: the chance
                                    each pick is a random ready op (0.002) */
    bool reorder;                /* search over schedules too (true); false:
                                    the profile's op order, pools only: what
                                    a caller that cannot reorder its ops can
                                    apply */
} cham_swapadvisor_options_t;

CHAM_API cham_swapadvisor_options_t cham_swapadvisor_options_default(void);

/* What the search found. */
typedef struct cham_swapadvisor_result {
    uint64_t step_ns;            /* the best candidate's simulated step */
    uint64_t ideal_ns;           /* the ops' time alone: no swap waits */
    uint64_t profile_order_ns;   /* the profile's order with the best pool */
    uint64_t swapped_in_bytes;   /* of the best candidate, per step */
    uint64_t swapped_out_bytes;
    uint32_t swaps_in, swaps_out;
    uint32_t n_classes;          /* size classes of its pool */
    uint64_t pool_bytes;         /* objects x class sizes */
    uint32_t generations;        /* done */
    uint64_t evaluations;        /* candidates simulated */
    double search_seconds;       /* wall clock the search took */
    bool stopped_by_time;        /* the time limit, not the generation
                                    count, ended it: the result then
                                    depends on the machine's speed */
    bool reordered;              /* the best schedule is not the profile's */
    size_t n_ops;
    uint32_t *schedule;          /* n_ops profile op indices, the best order
                                    (owned: cham_swapadvisor_result_free) */
} cham_swapadvisor_result_t;

CHAM_API void cham_swapadvisor_result_free(cham_swapadvisor_result_t *r);

/* Searches and, when out is not NULL, makes the policy the runtime applies
 * in the profile's op order: the swaps of the best pool for that order
 * (with reorder on, the best pool found for any order, planned again for
 * the profile's). The config gives capacity, reserve and bandwidths as for
 * the other planners (recompute, model_state, score_c and min_swap_bytes
 * are not used: SwapAdvisor swaps every tensor, model state included).
 * result may be NULL; when given, free it with
 * cham_swapadvisor_result_free. Fails with CHAM_ERR_INVALID_ARG for bad
 * input, CHAM_ERR_OUT_OF_MEMORY (err names the op and the bytes) when no
 * pool of the usable bytes holds some op's tensors at once, and
 * CHAM_ERR_HOST_OOM. */
CHAM_API cham_status_t cham_plan_swapadvisor(const cham_profile_t *profile,
                                             const cham_planner_config_t *config,
                                             const cham_swapadvisor_options_t *options,
                                             cham_policy_t **out, cham_swapadvisor_result_t *result,
                                             char *err, size_t err_size);

#ifdef __cplusplus
}
#endif

#endif
