/* What the planners share (src/policy/<planner>/ each): the logical
 * layers (layers.c, paper Eq. 1), the input checks, capacity rule and
 * predictions (plan.c), the replay of a policy with FIFO link queues
 * (replay.c), the idle tensors (tensors.c), the recomputation candidates
 * (recompute.c) and the copy time. Chameleon's own generator is in
 * chameleon/ (chameleon-impl.h). docs/policy.md explains the choices. */
#ifndef CHAM_POLICY_PLAN_IMPL_H
#define CHAM_POLICY_PLAN_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/policy.h"

/* The device's time for op k when the profile has its cost: the cost and
 * the device's time per kernel beyond it (none for an op of no cost: it
 * launched no kernel on the compute stream, a copy or a collective on a
 * stream of its own); `otherwise` when it has none. */
static inline double cham_gen_op_ns(const cham_profile_view_t *v, size_t k, double otherwise)
{
    if (!v->ops[k].has_cost)
        return otherwise;
    return v->ops[k].cost_ns > 0 ? v->ops[k].cost_ns + (double)v->kernel_overhead_ns : 0;
}

/* ---- logical layers (layers.c) ------------------------------------------ */

/* Invariants: layers tile the ops [0, n_ops) in order; layer_of_op[k] is the
 * layer holding op k; phase_of_op[k] is op k's effective phase (an "other"
 * op takes the phase of the op before it, leading "other" ops that of the
 * first op that is not). */
typedef struct cham_gen_layers {
    cham_logical_layer_t *v;
    size_t n;
    uint32_t *layer_of_op;       /* n_ops */
    cham_phase_t *phase_of_op;   /* n_ops */
    double *op_ns;               /* n_ops: each op's estimated time */
    bool timed;                  /* the layers' times are the ops' costs */
    /* The profile's ops when every op has its own cost: then their
     * collectives (comm_ns) run on a stream of their own in the replay.
     * NULL when the times are shares of the measured step, which already
     * hold what the step waited for its collectives. */
    const cham_profile_op_t *comm;
    uint64_t copy_latency_ns;    /* the profile's: every copy takes it beyond
                                    its bytes over the bandwidth */
} cham_gen_layers_t;

/* The default layer count: the most common occurrence count among forward
 * tokens that occur at least twice (the model's repeat count), else
 * ceil(sqrt(forward ops)); at least 1. */
uint32_t cham_gen_default_layers(const cham_profile_view_t *v);

/* Builds the layers with their Eq. 1 times (remaining_ns = time_ns).
 * false when the host is out of memory. */
bool cham_gen_layers_build(const cham_profile_view_t *v, const cham_planner_config_t *cfg,
                           cham_gen_layers_t *out);
void cham_gen_layers_free(cham_gen_layers_t *l);

/* ---- shared by the planners (generate.c) -------------------------------- */


/* The capacity planned against (the config's, else the profile's) and
 * usable = capacity - reserve (the config's reserve or, when UINT64_MAX,
 * the default rule); CHAM_ERR_INVALID_ARG with a message when nothing is
 * usable. */
cham_status_t cham_gen_capacity(const cham_profile_view_t *v, const cham_planner_config_t *c,
                                uint64_t *capacity, uint64_t *usable, char *err, size_t err_size);

/* What every planner does first: checks that profile, config and out are
 * given (*out = NULL), fills *v, checks the config (positive finite
 * bandwidths, score_c >= 0, at most UINT32_MAX / 2 ops, op costs, if any,
 * one per op, finite, >= 0 and not all 0) and works out the capacity
 * planned against (the config's, else the profile's) and usable =
 * capacity - reserve, the reserve being the config's or, when UINT64_MAX,
 * the default rule (docs/policy.md). CHAM_ERR_INVALID_ARG with a message
 * (`who` names the planner in it) when anything is wrong. */
cham_status_t cham_gen_start(const char *who, const cham_profile_t *profile,
                             const cham_planner_config_t *config, cham_policy_t **out,
                             cham_profile_view_t *v, uint64_t *capacity, uint64_t *usable,
                             char *err, size_t err_size);

/* Completes a policy whose items are in place (in swap-out order): appends
 * the layers and sets n_ops, capacity, usable, the peaks (curve: the
 * profile's curve without swaps, 2 n_ops samples; predicted: minus each
 * item's bytes over samples [2 free_op, 2 swap_in_op)) and the step times
 * (the profile's, and the predicted one). false when the host is out of
 * memory. */
bool cham_gen_finish(cham_policy_t *p, const cham_gen_layers_t *l, const cham_profile_view_t *v,
                     const uint64_t *curve, uint64_t capacity, uint64_t usable);

/* The predicted memory: mem[s] (2 n_ops + 1 entries, the last scratch)
 * is the curve less each item's bytes over samples [2 free_op,
 * 2 swap_in_op) (of one that wraps, [2 free_op, 2 n_ops) and
 * [0, 2 swap_in_op), or with free_op > n_ops [2 (free_op - n_ops),
 * 2 swap_in_op)). The predicted peak is its largest sample (0 at
 * least). */
void cham_gen_predicted_memory(const cham_policy_t *p, const uint64_t *curve, int64_t *mem);
uint64_t cham_gen_peak_of(const int64_t *mem, size_t n_ops);

/* The predicted step: the ops' times (their costs where the profile has
 * them; a profiled step slowed by stalls would count those twice) plus
 * every item's stall_ns and recompute_ns and the replay's waits for
 * collectives. */
uint64_t cham_gen_predicted_step(const cham_policy_t *p, const cham_gen_layers_t *l);

/* replay.c: sets each item's stall_ns to what replaying the policy in op
 * order, with FIFO link queues, predicts it waits for (docs/policy.md,
 * "The replay"); false when the host is out of memory. */
bool cham_gen_replay(cham_policy_t *p, const cham_gen_layers_t *l, size_t n_ops,
                     double h2d_bw, double d2h_bw);

/* The same in parts, for replaying one policy many times as its swap-ins
 * and frees move (refine.c): the items' events sorted once (init; false
 * when the host is out of memory), an item's swap-in (or with free_op its
 * free) moved to another op (the item's field is the caller's to set),
 * the replay run (O(ops + items), twice when a copy out runs on into the
 * next step); out_wait: how long the run waited for each item's copy out,
 * out_done: when each copy out ended (in the step's clock). */
typedef struct cham_gen_replay_event {
    uint32_t op, item;
} cham_gen_replay_event_t;
typedef struct cham_gen_room {
    uint64_t done, bytes;        /* a block given back: when its copy out ends, its size */
} cham_gen_room_t;
typedef struct cham_gen_replayer {
    cham_gen_replay_event_t *out, *freed, *in, *use;   /* by (op, item) */
    cham_gen_room_t *room;       /* scratch: the blocks given back at one op */
    uint64_t *out_done, *in_done;
    uint64_t *before;            /* the step before's copies out, ended after it began */
    uint64_t *out_wait;
    uint64_t *op_begin;          /* the caller's (n_ops) or NULL: when each op began,
                                    less the waits for copies out before it */
    uint64_t *op_at;             /* the caller's (n_ops) or NULL: when each op was
                                    reached, before any wait */
    uint64_t end, out_waited;    /* when the step ended; the waits for copies out */
    uint64_t carry_ns;           /* the waits the step before's copies added */
    size_t n;
} cham_gen_replayer_t;
bool cham_gen_replayer_init(cham_gen_replayer_t *r, const cham_policy_t *p);
void cham_gen_replayer_move(cham_gen_replayer_t *r, uint32_t item, uint32_t op, bool free_op);
void cham_gen_replayer_run(cham_gen_replayer_t *r, cham_policy_t *p,
                           const cham_gen_layers_t *l, size_t n_ops, double h2d_bw,
                           double d2h_bw);
void cham_gen_replayer_free(cham_gen_replayer_t *r);
/* The sum of the items' stall_ns and of the waits for collectives: what a
 * replay waits in all. */
uint64_t cham_gen_total_stall(const cham_policy_t *p);

/* The compute stream runs op `op`, of `op_ns`, from `now`; returns when it
 * is done. The op's collective (comm_ns > 0) is queued on the comm stream
 * after the compute stream's work so far and after the collectives before
 * it (*comm_end, updated); when the compute stream waits for it, the op
 * ends no sooner than the collective, and what that adds to op_ns is added
 * to *comm_wait. How the runtime runs cham_op_set_comm (runtime.md). */
uint64_t cham_gen_run_op(uint64_t now, double op_ns, const cham_profile_op_t *op,
                         uint64_t *comm_end, uint64_t *comm_wait);

/* ---- idle tensors (tensors.c) ----------------------------------------- */

/* One use of a storage: its op and its index in the profile's uses. */
typedef struct cham_gen_use_ref {
    uint64_t storage;
    uint32_t op, use;
} cham_gen_use_ref_t;

/* The profile's uses sorted by (storage, op, use), n_uses of them in a new
 * array (free it); NULL when the host is out of memory. */
cham_gen_use_ref_t *cham_gen_uses_by_storage(const cham_profile_view_t *v);

/* After its uses at r[i]'s op (r from cham_gen_uses_by_storage), the
 * storage's bytes are in the caller's host copy (every such use is
 * host_backed): sending it away copies nothing. */
bool cham_gen_backed_at(const cham_profile_view_t *v, const cham_gen_use_ref_t *r, size_t i);
/* The op of r[i] writes the storage whose bytes were dead (every use
 * there overwrites): bringing it back for that op copies nothing. */
bool cham_gen_overwritten_at(const cham_profile_view_t *v, const cham_gen_use_ref_t *r,
                             size_t i);

/* A tensor idle from one use to the next: an activation from its last
 * forward use to its first backward use, a persistent storage (model
 * state) between any two uses, or from its last use across the step's end
 * to its first use in the next step (wraps: then u <= f). */
typedef struct cham_gen_tensor {
    uint64_t storage, bytes;     /* bytes: storage_bytes at the last forward use */
    uint32_t last_fwd, first_bwd;   /* ops f and u: f < u, or u <= f when wraps */
    uint32_t out_use, in_use;    /* indices into the profile's uses */
    bool wraps;
    bool backed;                 /* the caller's host copy holds it: no copy out */
    bool overwritten;            /* the use at u writes it whole: no copy back,
                                    its block taken at u */
    uint32_t kept_after;         /* the gap of the same storage before this one
                                    (itself when it is the only one) when no
                                    use from that gap's end to f writes it:
                                    if that gap's bytes came back by a copy,
                                    the runtime still holds them and the copy
                                    out copies nothing; NO_GAP otherwise */
    bool chosen;
    bool swapped;                /* chosen to swap (not to recompute) */
    bool out_kept;               /* a kept copy makes its copy out free */
    uint32_t item;               /* chosen: its item in the policy */
} cham_gen_tensor_t;

#define CHAM_GEN_NO_GAP UINT32_MAX

/* Every storage whose use before its first backward use is a forward use,
 * with at least min_bytes; with persistent, also every gap of a persistent
 * storage of at least min_bytes (docs/policy.md, "Model state"), but no
 * gap across the step's end for the n_resident storages of `resident`
 * (sorted ids; the planner config's resident_at_end). Several tensors may
 * share a storage. false when the host is out of memory. */
bool cham_gen_tensors(const cham_profile_view_t *v, const cham_gen_layers_t *l,
                      uint64_t min_bytes, bool persistent, const uint64_t *resident,
                      size_t n_resident, cham_gen_tensor_t **out, size_t *n);

/* For each of t[0, n), the gap whose kept_after it is (CHAM_GEN_NO_GAP:
 * none); NULL when the host is out of memory. */
uint32_t *cham_gen_kept_next(const cham_gen_tensor_t *t, size_t n);

/* ---- recomputation candidates (recompute.c) ----------------------------- */

/* An idle tensor whose producing op may run again at its first backward
 * use: the op was declared recomputable, the tensor is not written between
 * it and that use, and the op's inputs are alive then and unchanged. */
typedef struct cham_gen_recomp {
    uint32_t tensor;             /* index into the tensors */
    uint32_t op;                 /* the op that makes it (one re-run makes all
                                    its outputs) */
    uint64_t storage, bytes;
    double cost_ns;              /* the op's re-run time (caller's, else the
                                    mean), its rebuilt inputs' included */
    uint32_t first_input, n_inputs;   /* in inputs[]: the op's input storages,
                                         and after a rebuilt one those of the
                                         op that makes it */
} cham_gen_recomp_t;

typedef struct cham_gen_recomp_list {
    cham_gen_recomp_t *v;        /* cheapest per byte first */
    size_t n;
    uint64_t *inputs;
} cham_gen_recomp_list_t;

/* The candidates, in the order the planner takes them: by cost per byte;
 * through_freed as the planner config's. Empty when the profile has no
 * recomputable op. false when the host is out of memory. */
bool cham_gen_recompute_list(const cham_profile_view_t *v, const cham_gen_tensor_t *t,
                             size_t n_t, bool through_freed, cham_gen_recomp_list_t *out);
void cham_gen_recompute_list_free(cham_gen_recomp_list_t *rl);

/* ---- copy time (plan.c) ------------------------------------------------ */

/* Nanoseconds one copy of bytes takes at bw bytes/s, rounded up, with the
 * device's fixed latency_ns per copy (a copy of a few KiB costs that, not
 * nothing: re-runs pay the kernel overhead alike). */
uint64_t cham_gen_transfer_ns(uint64_t bytes, double bw, uint64_t latency_ns);

#endif
