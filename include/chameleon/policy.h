/* Swap policies and the planners that make them.
 *
 * A planner turns a detailed profile (chameleon/profile.h) and a device
 * description into a policy: per tensor, after which op it leaves the
 * device, when its block may be reused, and before which op it comes back.
 * The policy predicts its own step time and peak memory, so planners can be
 * compared without running them. Chameleon's generator (paper §5,
 * Algorithm 2) is the first planner, the vDNN baseline the second:
 * docs/policy.md. */
#ifndef CHAMELEON_POLICY_H
#define CHAMELEON_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/profile.h"
#include "chameleon/status.h"
#include "chameleon/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a planner knows about the device and how to plan. Start from
 * cham_planner_config_default() and fill in the device. */
typedef struct cham_planner_config {
    uint64_t capacity;           /* device bytes; 0 = the profile's */
    uint64_t reserve;            /* bytes kept free for fragmentation and
                                    workspace; UINT64_MAX = the default rule
                                    (docs/policy.md) */
    double h2d_bandwidth;        /* bytes/s, for swap-ins (required) */
    double d2h_bandwidth;        /* bytes/s, for swap-outs (required) */
    uint32_t forward_layers;     /* logical layers; 0 = the default rule */
    uint32_t backward_layers;
    double score_c;              /* C in Score = N_MRE + C * S (Eq. 2) */
    uint64_t min_swap_bytes;     /* smaller tensors are never candidates */
    bool partial;                /* when the memory cannot be brought under
                                    the usable limit, return the policy of
                                    what could be placed (its predicted_peak
                                    is then above usable; err still says
                                    what is left) instead of failing */
    uint32_t free_delay_ops;     /* ops a swapped-out block waits past its
                                    predicted copy completion before reuse: a
                                    margin for the timing error of Eq. 1 (0) */
    bool recompute;              /* may drop and recompute tensors made by
                                    ops the profile marks recomputable, and
                                    then takes the logical layers' times
                                    from the profile's op costs where it has
                                    them (true); false: swaps only, Eq. 1
                                    (docs/policy.md, "Recomputation") */
    bool through_freed;          /* with recompute: may recompute a tensor
                                    whose op read one the caller freed
                                    before the drop, made again first by
                                    its own op (attention's scores for its
                                    probabilities); the runtime keeps such
                                    tensors in managed mode only (true;
                                    docs/policy.md, "Recomputation") */
    bool model_state;            /* may move persistent tensors (the
                                    profile's persistent uses: model state)
                                    between any two uses and across the
                                    step's end (true; docs/policy.md,
                                    "Model state") */
    bool early_swap_in;          /* with the copy queues: each swap-in as
                                    early as memory allows, not as late as
                                    it can still be done in time; a margin
                                    for the queues' timing (false;
                                    docs/policy.md, "The copy queues") */
    bool refine;                 /* with recomputation and op costs: each
                                    swap-in the replay says stalls moved
                                    earlier where the memory allows (true;
                                    docs/policy.md, "Refinement") */
    bool less_memory;            /* with recomputation: the k found planned
                                    again with 1% and 2% of the capacity
                                    more kept free, the best prediction
                                    kept (true; docs/policy.md, "Less
                                    memory") */
    bool cover_tails;            /* with recomputation: where a swap across
                                    the step's end waits for its copy back,
                                    the k found planned again with such
                                    swaps covering this step's tail alone,
                                    the better prediction kept (true;
                                    docs/policy.md, "Swaps across the
                                    step's end") */
    bool swaps_alone;            /* with recomputation: where the search's
                                    best fits, the paper's swap-only plan
                                    too, kept where it fits and predicts
                                    faster (true; docs/policy.md,
                                    "Recomputation") */
    bool swap_in_at_use;         /* where no tensor idle in its window (up
                                    to a layer before its use) is left, a
                                    swap-in issued when its use begins, the
                                    use waiting for the copy (true;
                                    docs/policy.md, "Swap-ins at the use") */
    bool overwrites;             /* a storage the use after a gap overwrites
                                    (the profile's overwrites) comes back
                                    at that use with no copy; Chameleon
                                    also plans without that where the
                                    profile has such a use, the better
                                    prediction kept (true; docs/policy.md,
                                    "A use that overwrites") */
    /* Optional per-op device time estimates (ns), n_ops of them, in profile
     * op order; NULL = Eq. 1 (step time spread evenly over the ops). */
    const double *op_cost_ns;
    size_t n_op_costs;
    /* Optional: persistent storages (profile storage ids, sorted
     * ascending) the step must end with on the device: the step that
     * follows runs another plan that uses them and does not want them
     * away, so one away across the step's end would come back at its first
     * op, the compute stream waiting for the copy. They are still moved
     * between two uses within the step (docs/policy.md, "Model state"). */
    const uint64_t *resident_at_end;
    size_t n_resident_at_end;
} cham_planner_config_t;

/* The default reserve (config.reserve UINT64_MAX): 2% of the capacity
 * where the allocator moves free memory between blocks (expandable
 * segments: only partly used pages strand it), 5% where it cannot (classic
 * segments, or an allocator the planner does not know: the default rule);
 * at least 256 MiB, at most 20% (docs/policy.md, "Inputs and knobs"). */
CHAM_API uint64_t cham_planner_default_reserve(uint64_t capacity, bool memory_moves);

/* reserve: default rule; score_c 1; min_swap_bytes 1 MiB; no op costs. */
CHAM_API cham_planner_config_t cham_planner_config_default(void);

/* A logical layer (paper §5.4): a run of ops of one phase. */
typedef struct cham_logical_layer {
    uint32_t start_op;           /* first op */
    uint32_t n_ops;
    cham_phase_t phase;          /* forward, backward or optimizer */
    uint64_t time_ns;            /* estimated time of the layer (Eq. 1) */
    uint64_t remaining_ns;       /* transfer time not yet assigned */
} cham_logical_layer_t;

/* One tensor to swap out and back, or to drop and recompute. Ops are
 * indices into the profile's ops. A recomputed item is dropped right
 * after swap_out_op (swap_out_done_op = swap_out_op, free_op the op after)
 * and the op that made it runs again when op swap_in_op begins. An
 * activation is away between its last forward and its first backward
 * use; a persistent tensor (model state) between any two of its uses, or
 * from its last use to its first in the next step (wraps). */
typedef struct cham_policy_item {
    uint64_t storage;            /* storage id in the profile */
    uint64_t bytes;              /* bytes moved (the storage's) */
    cham_tensor_use_t out_use;   /* features at its last forward use */
    cham_tensor_use_t in_use;    /* features at its first backward use */
    uint32_t swap_out_op;        /* swap out right after this op (last fwd use) */
    uint32_t swap_out_done_op;   /* the op running when the copy completes */
    uint32_t free_op;            /* block reusable once this op is dispatched */
    uint32_t swap_in_layer;      /* logical layer the swap-in is placed in */
    uint32_t swap_in_op;         /* issue the swap-in before this op */
    uint32_t use_op;             /* first backward use: must be back by then */
    double score;                /* Eq. 2 */
    uint64_t stall_ns;           /* predicted wait before use_op (fallback) */
    bool recompute;              /* dropped and recomputed, not swapped */
    uint64_t recompute_ns;       /* recompute: the re-run's predicted time */
    uint32_t made_op;            /* recompute: the op that made it, whose
                                    inputs the caller frees before the drop
                                    are kept as ghosts (docs/executor.md,
                                    "Ghosts"); UINT32_MAX: none kept */
    bool wraps;                  /* a persistent tensor away across the step's
                                    end: swap_in_op and use_op are ops of the
                                    next step (use_op <= swap_out_op), and
                                    free_op may be n_ops (the next step's
                                    first op) */
    bool out_kept;               /* its bytes came back by a copy earlier in
                                    the step (or, wrapping, at its start)
                                    and nothing wrote them since: the
                                    runtime still holds that copy, so the
                                    swap-out copies nothing (docs/executor.md,
                                    "Copies kept after a swap-in") */
} cham_policy_item_t;

typedef struct cham_policy_view {
    const char *planner;         /* "chameleon", ... */
    size_t n_items;
    const cham_policy_item_t *items;   /* in swap-out order */
    size_t n_layers;
    const cham_logical_layer_t *layers;
    uint64_t capacity;           /* planned against */
    uint64_t usable;             /* capacity - reserve */
    uint64_t peak_without_swaps; /* the profile's rebuilt peak */
    uint64_t predicted_peak;     /* peak with the policy applied */
    uint64_t step_ns;            /* the profile's step time */
    uint64_t predicted_step_ns;  /* with the policy's stalls */
    uint64_t predicted_carry_ns; /* of those, what copies out that the step
                                    before left running cost (the step after
                                    another's, or from an idle device, is
                                    that much faster); not saved in JSON */
    size_t n_ops;                /* ops of the profile planned for */
} cham_policy_view_t;

CHAM_API void cham_policy_get(const cham_policy_t *policy, cham_policy_view_t *view);
CHAM_API void cham_policy_free(cham_policy_t *policy);

/* Chameleon's generator (paper Algorithm 2). When the memory reduction list
 * cannot be emptied it fails with CHAM_ERR_OUT_OF_MEMORY and err says how
 * many bytes could not be removed and at which op. */
CHAM_API cham_status_t cham_plan_chameleon(const cham_profile_t *profile,
                                           const cham_planner_config_t *config,
                                           cham_policy_t **out, char *err, size_t err_size);

/* vDNN-style baseline: every tensor idle between its last forward use and
 * its first backward use (at least min_swap_bytes) is swapped out after its
 * last forward use; its block is reusable from the start of the next logical
 * layer (vDNN waits for a layer's offloads at the layer boundary), and it is
 * brought back at the start of the logical layer before the one of its first
 * backward use (one-layer prefetch). Memory is not a goal: the policy is the
 * same whatever the capacity, and predicted_peak says whether it fits. Fails
 * only with CHAM_ERR_INVALID_ARG (bad inputs, as cham_plan_chameleon's) or
 * CHAM_ERR_HOST_OOM, err saying why. docs/policy.md, "vDNN baseline". */
CHAM_API cham_status_t cham_plan_vdnn(const cham_profile_t *profile,
                                      const cham_planner_config_t *config, cham_policy_t **out,
                                      char *err, size_t err_size);

/* A lower bound on the step time of any policy that keeps, swaps and
 * recomputes (the ops the profile marks recomputable) on a device of the
 * config's capacity (the whole capacity: no reserve) and bandwidths, from
 * the profile's op costs (cham_op_set_cost; ops without one count 0) and
 * its memory curve without swaps. docs/policy.md, "The lower bound", has the
 * argument. */
typedef struct cham_step_bound {
    bool feasible;               /* false: at `sample` more bytes exceed the
                                    capacity than any policy could move */
    uint64_t bound_ns;           /* no policy's step is faster (UINT64_MAX
                                    when not feasible) */
    uint64_t compute_ns;         /* the ops' own time: their costs, and the
                                    waits for the collectives they run
                                    (cham_op_set_comm) on a stream of their
                                    own; the step with all the memory it
                                    wants */
    uint32_t sample;             /* the memory sample that binds (2 op + 0|1) */
    uint64_t excess_bytes;       /* the curve above the capacity there */
    uint64_t swap_bytes;         /* the mix that reaches the bound there: */
    uint64_t recompute_bytes;    /* bytes copied out and bytes dropped
                                    (host-backed bytes leave for free) */
} cham_step_bound_t;

CHAM_API cham_status_t cham_plan_bound(const cham_profile_t *profile,
                                       const cham_planner_config_t *config, cham_step_bound_t *out,
                                       char *err, size_t err_size);

/* JSON (docs/policy-format.md). Loading checks everything; errors name the
 * file and the position or field. */
CHAM_API cham_status_t cham_policy_save_json(const cham_policy_t *policy, const char *path,
                                             char *err, size_t err_size);
CHAM_API cham_status_t cham_policy_load_json(const char *path, cham_policy_t **out, char *err,
                                             size_t err_size);

#ifdef __cplusplus
}
#endif

#endif
