/* The runtime's internals, shared by its source files:
 *
 *   context.c   context lifetime, streams, allocators, hooks, log, stats
 *   tensor.c    storages and views, reference counts, swap out and in
 *   dispatch.c  the op bracket, phases, step end, the profilers
 *   names.c     names of stages, phases and dtypes
 *   config.c    configuration and its JSON file
 *   executor.c  applying a policy: matching, planned swaps (paper §6)
 *   oom.c       allocation with the out-of-memory path (Algorithm 3)
 *   victims.c   the OOM path's index of storages by size (issue 47)
 *   kept.c      pinned copies kept after a swap-in, going out again free
 *   recompute.c recomputable ops: records, drops, running them again
 *   loop.c      the stage loop's step end: Algorithm 1 (GenPolicy, WarmUp,
 *               the check in Stable), and which mode runs
 *   loop_static.c   the static planners' loop (one plan, kept or re-planned)
 *   loop_classes.c  the loop in sequence classes (classes.c: what a class is)
 *   plans.c     plans: a policy indexed for the executor, applied
 *   trials.c    trials: a plan generated, measured, the best kept
 *               (loop-impl.h is what these five share) */
#ifndef CHAM_RUNTIME_IMPL_H
#define CHAM_RUNTIME_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "alloc/block_tree.h"
#include "chameleon/alloc.h"
#include "chameleon/policy.h"
#include "chameleon/profile.h"
#include "chameleon/runtime.h"
#include "common/intern.h"
#include "common/message.h"
#include "match/match.h"
#include "match/positions.h"
#include "profile/stage.h"

typedef struct cham_storage cham_storage_t;
typedef struct cham_recompute cham_recompute_t;

/* One input of a recomputable op: the bytes of `storage` it read, linked
 * into that storage's list of dependents. While the output is dropped,
 * `held` is a view that keeps the storage alive. */
typedef struct cham_recompute_input {
    cham_recompute_t *rec;
    cham_storage_t *storage;
    size_t offset, bytes;
    cham_tensor_t *held;
    struct cham_recompute_input *prev, *next;
} cham_recompute_input_t;

/* How to make the outputs' data again (cham_op_set_recompute).
 * Invariants: out[j]->recompute == this for each out[j] still part of it
 * (NULL once written again or freed); each input is in its storage's
 * dependents; n_dropped counts the outputs DROPPED, and while it is above
 * 0 every input has `held` set. */
struct cham_recompute {
    uint64_t tag;
    double cost_ns;               /* the op's cost (cham_op_set_cost), < 0 unknown */
    bool releasing, dead;         /* see release_held in recompute.c */
    bool keeps_ghosts;            /* managed: the plan recomputes an output
                                     (inputs the caller frees become ghosts) */
    uint32_t n_dropped;
    bool stale;                   /* advisor: an input was written after a re-run
                                     was advised; forgotten once none is dropped */
    size_t n_outputs;
    cham_storage_t **out;         /* n_outputs, in the op's order */
    size_t *out_bytes;            /* each output's bytes */
    size_t n_inputs;
    cham_recompute_input_t in[];
};

/* ---- oom.c and victims.c: the OOM path's index and state (issue 47) ------
 * Storages with a device block, indexed so that the OOM path finds a
 * passive swap's victim in O(log n) (victims.c says how). A storage's
 * place follows its block, residency and holds_data: whoever changes one
 * calls cham_victims_update(s) after, and storage_unlink calls
 * cham_victims_forget. Invariant (cham_victims_valid): every live storage
 * is in the tree its fields name, under its key, and nothing else is. */
typedef struct cham_victim_link {
    cham_block_tree_node_t node;  /* key (0, bytes or 0 when unused, ~id) */
    uint8_t set;                  /* which tree (victims.c), 0: none */
    uint64_t episode;             /* the OOM episode that last moved it out */
} cham_victim_link_t;

typedef struct cham_oom_state {
    cham_block_tree_t data;       /* movable candidates: (bytes, newest first) */
    cham_block_tree_t unused;     /* holding no data: newest first */
    uint64_t episode;             /* OOM episodes so far; the current one's number */
    const cham_storage_t *serving;   /* the request the OOM path makes room
                                        for now, or NULL: it does not nest */
} cham_oom_state_t;

void cham_victims_update(cham_storage_t *s);
void cham_victims_forget(cham_storage_t *s);
/* Can s be moved out to make room now? Not if the op being begun uses it,
 * not if it holds no data (its block is given back without a copy
 * instead), not if it has no bytes, and only from the device. */
bool cham_victims_movable(const cham_context_t *ctx, const cham_storage_t *s);
/* The victim for a request of `bytes`: the smallest movable storage of at
 * least bytes (*enough: its block alone makes room), else the largest;
 * newest first among equal sizes. NULL if none. O(log n) plus the pinned
 * storages skipped. */
cham_storage_t *cham_victims_closest(const cham_context_t *ctx, size_t bytes, bool *enough);
/* The storages that hold no data, newest first; pinned ones included. */
cham_storage_t *cham_victims_unused_first(const cham_context_t *ctx);
cham_storage_t *cham_victims_unused_next(const cham_storage_t *s);
/* Whole-index check, O(n log n): true, or false and the reason in why. */
bool cham_victims_valid(const cham_context_t *ctx, char *why, size_t why_size);
/* Asserts cham_victims_valid under CHAM_DEBUG_CHECKS; nothing otherwise. */
void cham_victims_debug_check(const cham_context_t *ctx);

/* Bytes of one tensor's data, wherever it is.
 * Invariants: residency DEVICE or MOVING_IN iff block (managed) or ptr
 * (advisor) is set; HOST iff block is not (managed: with host_block holding
 * the data, or without it for a storage that holds none), or (advisor)
 * the caller reported the storage moved out; on the device, host_block
 * only as a kept copy holding the same bytes (kept); views > 0
 * while the storage is alive; MOVING_IN while the compute stream has not
 * yet waited on in_event (the last swap-in's completion). */
struct cham_storage {
    cham_context_t *ctx;
    uint64_t id;                  /* unique within the context */
    size_t bytes;
    cham_residency_t residency;
    cham_block_t *block;          /* managed: device memory */
    void *ptr;                    /* advisor: the caller's device memory */
    cham_block_t *host_block;     /* pinned copy while swapped out; kept
                                     after a swap-in until its bytes change,
                                     so that going out again copies nothing */
    bool kept;                    /* host_block was read by a swap-in */
    cham_storage_t *kept_prev, *kept_next;   /* ctx->kept, while kept on the device */
    void *host_copy;              /* the caller's pinned copy (cham_tensor_set_host_copy) */
    bool host_valid;              /* host_copy holds its bytes (not written since) */
    bool backed;                  /* away with its bytes in host_copy only */
    bool host_pending;            /* cham_tensor_host_update: not back before
                                     cham_tensor_host_ready */
    cham_event_t *out_event;      /* completion of the last swap-out copy */
    cham_event_t *in_event;       /* completion of the last swap-in */
    cham_stream_t *ext_stream;    /* a caller's stream that used it, or NULL */
    cham_event_t *ext_event;      /* that stream's work on it */
    cham_event_t *host_event;     /* cham_tensor_host_ready: the update's end */
    bool host_waited;             /* a swap-in since waited for host_event: the
                                     swap-in stream's order holds it for later ones */
    cham_tensor_t *view_list;     /* its live views */
    uint32_t views;
    bool advised;                 /* advisor mode: a planned move was advised */
    /* Features for recognising the tensor across steps (paper appendix A),
     * counted from the start of step feat_step. */
    cham_features_t feat;
    uint64_t feat_step;
    /* It may hold data: an op has used it, or its address was handed out
     * (cham_tensor_data), so the caller may have written it outside an op.
     * Such a storage is never given back without a copy. */
    bool holds_data;
    bool discarded;               /* cham_tensor_discard: dead bytes, not to be
                                     read before a write */
    bool dead_away;               /* discarded while swapped out: it comes back
                                     without a copy (a swap-in to the profile) */
    uint64_t pin;                 /* = ctx->pin while the op being begun uses it */
    uint64_t input_pin;           /* = ctx->pin while the op being begun reads it */
    uint32_t item;                /* policy item matched this step, or CHAM_MATCH_NONE */
    uint32_t item_op;             /* the op of this step it matched at; UINT32_MAX
                                     once it was used after that */
    cham_recompute_t *recompute;  /* how to make its data again, or NULL */
    cham_recompute_input_t *dependents;  /* recomputable ops that read it */
    uint64_t born_step;           /* ctx->step when it was made */
    uint64_t away_step;           /* ctx->step when it last left the device */
    size_t carry_slot;            /* 1 + its index in exec.carried, or 0 */
    uint32_t internal_views;      /* of views, the runtime's own (recompute.c) */
    cham_tensor_t *ghost;         /* the caller released it, a recomputable op
                                     may read it again: the view that keeps
                                     it (recompute.c, cham_recompute_ghost) */
    bool freeing;                 /* storage_free is under way */
    bool lost;                    /* advisor: dropped, and an input of its op
                                     was released before it was made again */
    uint64_t advice_pin;          /* advisor: = ctx->pin once a swap-in or a
                                     re-run of it is in the list of the op
                                     being begun */
    cham_storage_t *prev, *next;  /* the context's live storages */
    cham_victim_link_t victim;    /* oom.c and victims.c: its place in the index */
    char label[48];               /* of its first view */
};

/* Whether a storage's bytes are on the host while it is away: in the
 * runtime's pinned copy or in the caller's (no copy: it holds no data). */
static inline bool cham_storage_on_host(const cham_storage_t *s)
{
    return s->residency == CHAM_RESIDENT_HOST && (s->host_block || s->backed);
}

/* kept.c: pinned copies kept on the device after a swap-in. s was
 * swapped in from its host_block, which it keeps (add); it went out
 * without a copy, its block holding its bytes (leave). */
void cham_kept_add(cham_storage_t *s);
void cham_kept_leave(cham_storage_t *s);
/* The pinned block back to its pool once the work queued on `user` (the
 * stream still reading or writing it) is done. */
void cham_host_block_free(cham_storage_t *s, cham_stream_t *user);
/* Its bytes on the device are about to change (an op writes it, or the
 * caller may): the pinned copy kept since its last swap-in goes. */
void cham_storage_forget_kept(cham_storage_t *s);
/* Every kept copy goes. */
void cham_context_forget_kept(cham_context_t *ctx);
/* A pinned block for the copy of s out (kept.c has the order). */
cham_status_t cham_pinned_block(cham_storage_t *s, cham_block_t **host);

/* Invariant: refs > 0 while the handle is alive; [offset, offset + bytes)
 * lies inside the storage. */
struct cham_tensor {
    cham_storage_t *storage;
    cham_tensor_t *prev_view, *next_view;   /* the storage's view list */
    size_t offset, bytes;
    cham_dtype_t dtype;
    uint32_t refs;
    bool internal;                /* the runtime's own view (recompute.c) */
    void *user;                   /* the caller's (cham_tensor_set_user) */
    char label[48];
};

/* A policy ready to apply: the policy, its matching index and its items in
 * swap-in order. Shared by the loop's trials and the policy cache. */
typedef struct cham_plan {
    cham_policy_t *policy;
    cham_policy_view_t view;      /* its parts */
    cham_match_t match;
    cham_positions_t *positions;  /* Capuchin's identification, or NULL */
    uint32_t *in_order;           /* item indices by swap_in_op */
    /* The ids of the model state its profiled step uses, sorted: what
     * another plan left away stays away if not among them (executor.c,
     * cham_exec_send_away). */
    uint64_t *state_ids;
    size_t n_state;
    cham_op_token_t *tokens;      /* the profiled step's ops: n_tokens */
    bool *makes_dropped;          /* n_tokens: the op makes a tensor the plan
                                     recomputes (its record keeps ghosts) */
    size_t n_tokens;
    /* Its forward ops before the backward, the backward's first op, and
     * its backward ops (0: no backward). */
    uint32_t forward_ops, backward_first, backward_ops;
    /* Where its ops run in blocks (cham_set_block): one run of them in the
     * forward, [fwd_blocks, fwd_blocks_end), and one in the backward,
     * [bwd_blocks, bwd_blocks_end). anchored: it has exactly those two,
     * and the clock is set at their edges (executor.c, "the clock"). */
    bool anchored;
    uint32_t fwd_blocks, fwd_blocks_end, bwd_blocks, bwd_blocks_end;
    /* Anchored: the memory the policy predicts after the forward's blocks
     * (at the next op's begin). */
    uint64_t head_mem;
    /* The trial it was made as (its kind: trials.c) and its release
     * delay: a plan made again from another profile is made alike. */
    size_t trial;
    uint32_t free_delay;
    /* Its profiled step's work: the ops' compute time as the caller costs
     * them (0: some op has no cost). Trials on steps of other work are
     * compared per work (trials.c, cham_loop_measure_trial). */
    uint64_t work_ns;
    uint32_t refs;
} cham_plan_t;

/* A policy tried for one step in GenPolicy, and how the step went. */
typedef struct cham_trial {
    cham_plan_t *plan;
    uint32_t free_delay;          /* the planner's free_delay_ops */
    uint64_t step_ns;             /* measured: device idle to device idle */
    uint64_t predicted_ns;        /* its plan's prediction for that step */
    uint64_t passive, on_demand;  /* swaps the plan did not foresee */
    uint64_t over_budget;         /* advisor mode: bytes the step went past the budget */
    uint32_t timed_again;         /* steps of it that grew the pinned pool, not
                                     counted (loop.c) */
    uint64_t pinned_ns;           /* the last such step's time */
} cham_trial_t;

/* A trial whose step grew the pinned pool is timed again on its next
 * one, up to this many times (loop.c, genpolicy_end). */
enum { CHAM_TRIAL_RETIMES = 3 };

/* A trial that needed no passive or on-demand swap (in advisor mode: and
 * stayed within the budget): its policy covered the step. */
static inline bool cham_trial_clean(const cham_trial_t *t)
{
    return t->passive == 0 && t->on_demand == 0 && t->over_budget == 0;
}

/* A policy that ran clean, in clean_ns, is kept over the fastest, in
 * fastest_ns, that did not, when it is within 10% of it: one that needed
 * passive swaps may need more later, but a clean one much slower is no
 * bargain. The trials (trials.c's cham_loop_best_trial) and the check in Stable alike. */
static inline bool cham_clean_is_close(uint64_t clean_ns, uint64_t fastest_ns)
{
    return (double)clean_ns <= 1.1 * (double)fastest_ns;
}

/* stable_check.c: the kept policy and the next trials by time, each
 * measured over CHAM_CHECK_STEPS Stable steps until the fastest is known
 * (docs/executor.md, "The kept policy checked in Stable"). */
enum { CHAM_CHECK_CANDIDATES = 3, CHAM_CHECK_STEPS = 4 };

typedef struct cham_check_candidate {
    cham_plan_t *plan;            /* retained */
    uint64_t trial_ns;            /* its trial's step */
    uint64_t stable_ns;           /* the mean of its Stable steps; 0: not measured */
    bool ran_out;                 /* a Stable step of it needed passive swaps */
    bool clean;                   /* its trial needed none */
} cham_check_candidate_t;

typedef struct cham_check {
    cham_check_candidate_t cand[CHAM_CHECK_CANDIDATES];   /* the kept one first */
    size_t n, at;                 /* candidates (0: no check); the one applied */
    uint64_t sum_ns;              /* the current candidate's timed steps so far */
    size_t n_samples;
    uint32_t class_id;            /* the class it keeps the policy of, or 0 */
    uint64_t work_ref;            /* steps are timed as if of this work (trials.c) */
    bool done;                    /* the fastest is known: clear after applying it */
} cham_check_t;

typedef enum {
    CHAM_CHECK_MEASURING,         /* keep applying the same policy */
    CHAM_CHECK_TRY_NEXT,          /* apply the next candidate from now on */
    CHAM_CHECK_DONE,              /* keep this one for good; clear the check */
} cham_check_verdict_t;

/* Starts checking `kept`, chosen from trials[0..n), against the other
 * trials that covered their step, then those that did not; no check
 * (n = 0) when there are none or kept was not measured. */
void cham_check_start(cham_check_t *k, const cham_trial_t *trials, size_t n, cham_plan_t *kept,
                      uint32_t class_id);
/* A check left before it is done (another's starts): the best of the
 * candidates measured so far, to keep for class *class_id, or NULL. */
cham_plan_t *cham_check_abandon(const cham_check_t *k, uint32_t *class_id);
/* A Stable step in a row of steps applying the current candidate took
 * step_ns, with passive swaps or not (then the candidate's measurement
 * ends with it). *plan: the policy to apply from now on. */
cham_check_verdict_t cham_check_sample(cham_check_t *k, uint64_t step_ns, bool passive,
                                       cham_plan_t **plan);
void cham_check_clear(cham_check_t *k);

/* A sequence class (classes.c; docs/profiler.md, "Sequence classes"): a
 * recurring op sequence, its kept policy and, until it has one, the trials
 * made from its own profiles. */
typedef struct cham_class {
    uint32_t id;                  /* unique for the context's life, from 1 */
    cham_op_token_t *seq;         /* the sequence it was first seen with */
    size_t len;
    uint64_t fingerprint;
    cham_op_token_t *canon;       /* its canonical sequence (profile/canon.c) */
    size_t canon_len;
    uint64_t canon_fp;
    bool varies;                  /* steps of other sequences, the same canonical
                                     one, came as this class: its steps weigh
                                     differently */
    cham_profile_t *heaviest;     /* where it varies: the profile of its heaviest
                                     step so far (peak without swaps), its
                                     trials' source (loop_classes.c) */
    uint64_t heaviest_peak;
    uint64_t last_used;           /* step; the least recently used is evicted */
    uint32_t seen;                /* its steps so far */
    cham_plan_t *kept;            /* applied whenever it comes */
    cham_plan_t *next_trial;      /* made from its last profile, tried next time */
    uint32_t next_delay;          /* that trial's free_delay_ops */
    cham_trial_t *trials;         /* tried and measured */
    size_t n_trials, cap_trials;
    uint64_t reserve;             /* its planner reserve, as ctx->reserve */
    /* Its kept policy against the steps it applies to
     * (cham_loop_cover_heavier): Stable steps it ran since kept and those
     * that ran short; steps still to profile for one that ran short and
     * weighs more than its profile, steps profiled so, and kept policies
     * made again from such a step; the one before the last such, on
     * probation, with its own steps and short ones; the peak without
     * swaps a step must pass to be made again from (that of a policy made
     * again that lost its probation). The time and work of the kept
     * policy's synchronized steps since kept (profiled while hunting, or
     * on probation), and those of the one on probation. */
    uint32_t applied, shorts;
    uint32_t hunt_left, hunted, covers;
    cham_plan_t *uncovered;
    uint32_t uncovered_applied, uncovered_shorts;
    uint64_t cover_floor;
    uint64_t timed_ns, timed_work, uncovered_ns, uncovered_work;
    uint32_t timed, uncovered_timed;
} cham_class_t;

enum { CHAM_CLASS_HISTORY = 64 };   /* classes of the last steps, for prediction */

/* A storage away across the step's end (an item that wraps): it comes
 * back when op `op` of this step begins. */
typedef struct cham_carried {
    cham_storage_t *storage;      /* NULL once freed */
    uint32_t op;
} cham_carried_t;

/* Where in its step an anchored plan's clock stands (executor.c,
 * clock_follow_blocks): before, in and after the forward's blocks, then
 * the backward's. */
typedef enum cham_exec_region {
    CHAM_REGION_START,
    CHAM_REGION_FWD_BLOCKS,
    CHAM_REGION_FWD_AFTER,
    CHAM_REGION_BWD_BEFORE,
    CHAM_REGION_BWD_BLOCKS,
    CHAM_REGION_BWD_AFTER,
} cham_exec_region_t;

/* What the executor does in the step being run. Invariant: storage_of[i]
 * is the live storage item i matched this step, or NULL; carried[i] is a
 * live storage whose carry_slot is i + 1, or NULL. */
typedef struct cham_exec {
    cham_plan_t *plan;            /* applied this step, or NULL */
    cham_storage_t **storage_of;  /* n_items */
    size_t cap_items;
    uint32_t *pending;            /* items to swap out when the op ends */
    size_t n_pending, cap_pending;
    size_t in_next;               /* next entry of plan->in_order */
    uint64_t step_base;           /* ops_total at the step's start */
    /* The op of the profiled step the op being run stands for (executor.c,
     * "the clock"), and the one the next op will stand for. */
    uint32_t clock, clock_next;
    uint32_t forward_ops;         /* ops run in the forward phase this step */
    bool in_backward;             /* this step's backward has begun */
    /* An anchored plan's: the part of the step the op is in (the forward
     * before, in and after its blocks, then the backward's), the forward's
     * ops in blocks so far, and the ops the clock stays put for (a
     * heavier step's blocks the profile did not run). */
    cham_exec_region_t region;
    uint32_t block_ops, hold;
    cham_carried_t *carried;      /* by op: what comes back this step */
    size_t n_carried, cap_carried, carry_next;
} cham_exec_t;

struct cham_context {
    cham_config_t config;
    cham_device_t *dev;
    cham_stream_t *compute, *swap_out, *swap_in;
    cham_allocator_t *mem;        /* managed: device memory */
    bool memory_moves;            /* mem has expandable segments */
    cham_allocator_t *pinned;     /* managed: pinned host memory for swaps */
    cham_storage_t *kept;         /* storages kept on the device with their
                                     pinned copy, newest first (kept.c) */
    uint64_t kept_bytes;          /* their bytes */

    cham_intern_t tokens;

    /* The step being run. */
    uint64_t step;                /* steps ended: the runtime's own count */
    uint64_t number;              /* the step's number for people (cham_step_set_number) */
    bool backward;                /* this step has had a backward phase */
    uint64_t ops_total;           /* ops dispatched since creation */
    uint32_t ops_in_step;         /* ops begun in this step */
    double step_cost_ns;          /* its ops' costs (cham_op_set_cost) so far */
    bool step_uncosted;           /* ... and an op of it had none */
    uint64_t step_work_ns;        /* at its end: its work (trials.c), 0: unknown */
    bool in_op;
    cham_phase_t phase;
    int32_t block;                /* cham_set_block's, -1: none */
    uint64_t step_start_ns;
    cham_op_token_t *seq;         /* lightweight profile: this step's tokens */
    size_t seq_cap;
    int32_t *seq_blocks;          /* ... and each op's block (cham_set_block) */
    size_t seq_blocks_cap;
    cham_op_token_t *canon;       /* at the step's end: its canonical sequence */
    size_t canon_len, canon_cap;
    cham_stage_machine_t stages;

    /* Detailed profile. */
    bool detailed;                /* this step is profiled in detail */
    bool profile_requested;
    cham_profile_t *building;
    cham_profile_t *last_profile;
    uint64_t last_profile_step;   /* ctx->step while last_profile was taken */
    bool profile_failed;          /* host OOM while building: dropped */

    uint64_t next_storage_id;
    uint64_t live_storages;
    cham_storage_t *storages;     /* live ones, newest first */
    uint64_t pin;                 /* stamp of the op being begun */
    bool in_begin;                /* inside cham_op_begin */
    const char *hook;             /* the caller's hook running now ("the swap
                                     hook"), or NULL: see cham_hook_refuse */
    /* The op being dispatched: its tensors (cham_op_set_recompute reads
     * them) and whether it was declared recomputable. */
    cham_tensor_t **op_tensors;
    size_t op_inputs, op_outputs, cap_op_tensors;
    bool op_recomputable;
    double op_cost_ns;            /* cham_op_set_cost's, < 0 when none */
    bool preparing_outputs;       /* begin-op is bringing its outputs in */

    /* Acting (executor.c) and the loop around it (loop.c). */
    cham_exec_t exec;
    cham_action_t *actions;       /* advisor mode: what the op begun last advises */
    size_t n_actions, cap_actions;
    cham_trial_t *trials;         /* GenPolicy: policies tried, one a step */
    size_t n_trials, cap_trials;
    uint32_t trial_restarts;      /* GenPolicy begun again from a heavier step (loop.c) */
    size_t trial_base;            /* the first trial since: kinds count from it */
    cham_plan_t *next_plan;       /* to apply from the next step */
    uint64_t reserve;             /* planner reserve; 0 = the default rule */
    uint64_t last_sync_ns;        /* host time of the last step-end sync */
    bool synced;                  /* the last step ended with a sync */
    bool static_planned;          /* a baseline's one policy has been made */
    cham_op_token_t *static_seq;  /* SwapAdvisor, HyperOffload: the op sequence
                                     planned (before: the last step's) */
    size_t n_static_seq;
    uint32_t static_training_steps;   /* profiled with a backward, unplanned */
    bool static_changed;          /* ... and the step that ended differs: with
                                     swapadvisor_fail_on_change, cham_step_end
                                     fails (ctx->error says how) */
    uint64_t synced_step_ns;      /* the step that ended, idle to idle, or 0 */
    cham_check_t check;           /* the kept policy measured in Stable */
    const cham_plan_t *prev_stable_plan;   /* applied by the step before, if Stable */
    uint32_t prev_class;          /* that step's class id, or 0 */
    uint64_t step_passive, step_on_demand;  /* this step's unplanned swaps */
    uint64_t step_over_budget;    /* advisor mode: how far the step went past the budget */
    uint64_t pinned_segments;     /* the pinned pool's segment allocations at the
                                     step's start */
    bool step_pinned;             /* the pool took new segments in the step */
    uint64_t step_mem_peak;       /* the most mem_in_use has been this step */
    cham_class_t *classes;        /* config.policy_cache entries */
    size_t n_classes;
    uint32_t next_class_id;
    uint32_t history[CHAM_CLASS_HISTORY];   /* class ids of the last steps */
    size_t n_history;
    uint32_t context_hits, frequent_hits;   /* the last 32 steps, newest in bit 0:
                                               whether the context, the most
                                               frequent class would have
                                               predicted them right */
    uint32_t scored;                        /* steps scored, up to 32 (classes.c) */
    bool class_mode;              /* per-class policies (loop_classes.c says when) */
    uint64_t last_stable_step;    /* ctx->step when a step last ended Stable */
    uint32_t trial_class;         /* the class whose trial runs this step, 0: none */
    cham_oom_state_t oom;         /* oom.c and victims.c */
    cham_runtime_stats_t stats;

    cham_step_hook_t step_hook;
    void *step_hook_user;
    cham_recompute_hook_t recompute_hook;
    void *recompute_hook_user;
    cham_storage_t **ghosts;      /* storages kept by their ghost views */
    size_t n_ghosts, cap_ghosts;
    cham_swap_hook_t swap_hook;
    void *swap_hook_user;
    cham_log_hook_t log_hook;
    void *log_hook_user;
    char error[512];
};

/* Records a failure message (printf-style) on the context. */
void cham_context_error(cham_context_t *ctx, const char *fmt, ...) CHAM_PRINTF(2, 3);
/* Writes a log line (printf-style) through the hook or to stderr. */
void cham_context_log(cham_context_t *ctx, const char *fmt, ...) CHAM_PRINTF(2, 3);
/* Waits until the runtime's own streams (compute and the swaps') are idle,
 * and records the time as the last sync. In advisor mode the whole
 * device: the caller's kernels may run on streams of its own. */
void cham_context_idle(cham_context_t *ctx);

/* Hooks observe and launch kernels; they do not call back into the runtime,
 * which is in the middle of a change when it runs one (recomputing a
 * storage, making room, ending a step). A public call that would change the
 * runtime's state checks here first: cham_hook_refuse returns
 * CHAM_ERR_INVALID_ARG with an error naming `call` and the hook (CHAM_OK
 * when no hook runs); cham_hook_forbid, for calls that return nothing,
 * stops the program with that message (status.h: a programmer error). */
cham_status_t cham_hook_refuse(cham_context_t *ctx, const char *call);
void cham_hook_forbid(const cham_context_t *ctx, const char *call);
/* Runs the caller's `hook` ("the swap hook") from here: marks it running. */
static inline const char *cham_hook_enter(cham_context_t *ctx, const char *hook)
{
    const char *outer = ctx->hook;
    ctx->hook = hook;
    return outer;
}

/* Whether the op being dispatched (between cham_op_begin and cham_op_end)
 * uses s: moving or invalidating s now would lose what the op writes. */
static inline bool cham_storage_in_flight(const cham_storage_t *s)
{
    return s->ctx->in_op && s->pin == s->ctx->pin;
}
/* Advisor mode: whether the op being dispatched advised action `kind` for
 * s. Its swap-outs and drops are carried out after its kernels and may be
 * reported inside its bracket, operands or not. */
static inline bool cham_storage_advised_now(const cham_storage_t *s, cham_action_kind_t kind)
{
    const cham_context_t *ctx = s->ctx;
    for (size_t i = 0; i < ctx->n_actions; i++)
        if (ctx->actions[i].kind == kind && ctx->actions[i].tensor->storage == s)
            return true;
    return false;
}

/* Why such a move is refused, in its error. */
#define CHAM_IN_FLIGHT "the op being dispatched uses it (move it before its cham_op_begin " \
                       "or after its cham_op_end)"

/* tensor.c: brings a storage used by the op being begun onto the device
 * and makes the compute stream wait for its swap-in. */
cham_status_t cham_storage_prepare(cham_storage_t *s);
/* tensor.c: moves a storage to pinned host memory. Its device block is
 * reusable once op free_op (a global op index) has been dispatched, or,
 * with config.pytorch_record_stream, once host queries find the copy done. */
cham_status_t cham_storage_swap_out(cham_storage_t *s, cham_swap_cause_t cause,
                                    uint64_t free_op);
/* tensor.c: brings a storage on the host back. */
cham_status_t cham_storage_swap_in(cham_storage_t *s, cham_swap_cause_t cause);
/* tensor.c: a storage that holds no data (!holds_data): its device block
 * can go back at no cost (residency HOST without a host copy), and a new one
 * is taken when an op first uses it. */
void cham_storage_dematerialize(cham_storage_t *s);
cham_status_t cham_storage_materialize(cham_storage_t *s);
/* tensor.c: gives s's device block and pinned copy back, each in stream
 * order (a swap-in still writing the block, a copy still using the pinned
 * one, the caller's recorded stream). */
void cham_storage_give_back(cham_storage_t *s);
/* tensor.c: an internal view of all of s (keeps it alive; internal_views
 * counts it); NULL on host OOM. */
cham_tensor_t *cham_storage_new_view(cham_storage_t *s);
/* tensor.c: device bytes held by tensors change. */
void cham_context_mem_add(cham_context_t *ctx, int64_t bytes);
/* tensor.c: the context's live storages sorted by id, *n of them, in a new
 * array (free it); NULL when the host is out of memory. */
cham_storage_t **cham_storages_by_id(cham_context_t *ctx, size_t *n);
/* tensor.c: the storage with this id in such an array, or NULL. */
cham_storage_t *cham_storage_find(cham_storage_t *const *by_id, size_t n, uint64_t id);

/* oom.c: whether the OOM path may move tensors out (passive swaps). */
bool cham_oom_passive(const cham_context_t *ctx);
/* oom.c: a device block for owner's bytes on the compute stream, with the
 * out-of-memory path of Algorithm 3 (passive swaps of resident storages
 * the op being begun does not use). Errors name the request as
 * `what "owner's label"` (what: "tensor", "swap-in of"), formatted only
 * on failure: this runs for every tensor. */
cham_status_t cham_runtime_alloc(cham_context_t *ctx, cham_storage_t *owner, const char *what,
                                 cham_block_t **out);

/* executor.c: the step starts / an op begins (planned swap-ins) / a tensor
 * is used (matching) / an op ends (planned swap-outs) / a storage dies. */
void cham_exec_step_start(cham_context_t *ctx);
/* The step ends, before the next plan is chosen: the storages of items
 * that wrap, now away, are kept to come back in the next step whatever
 * plan it applies. */
void cham_exec_carry(cham_context_t *ctx);
/* A new plan applies from the next step on (managed mode): the storages of
 * its items that wrap, found by the profile's storage ids, leave now, so
 * the first step under it starts as the plan expects. */
void cham_exec_send_away(cham_context_t *ctx);
/* The plan's model-state ids, tokens and blocks from its profile (false:
 * out of host memory); cham_exec_plan_free frees them. */
bool cham_exec_plan_init(cham_plan_t *plan, const cham_policy_t *policy,
                         const cham_profile_t *profile);
void cham_exec_plan_free(cham_plan_t *plan);
cham_status_t cham_exec_op_begin(cham_context_t *ctx);
/* A use of t by the op being begun, the pos-th of its tensors (inputs,
 * then outputs). */
void cham_exec_use(cham_context_t *ctx, cham_tensor_t *t, cham_op_token_t token, uint32_t pos);
/* Before op `token` begins: with a Capuchin plan, whether the tensors the
 * plan names at this op index are there (CHAM_ERR_POLICY_MISMATCH if not). */
cham_status_t cham_exec_check_positions(cham_context_t *ctx, cham_op_token_t token,
                                        cham_tensor_t *const *inputs, size_t n_inputs,
                                        cham_tensor_t *const *outputs, size_t n_outputs);
/* executor.c: advisor mode: adds an action for the caller; a swap-in or a
 * re-run already listed for the op being begun is not listed twice (with
 * `needed` the listed one becomes needed). Whether it was added. */
bool cham_exec_advise(cham_context_t *ctx, cham_action_kind_t kind, cham_tensor_t *t,
                      bool needed, uint64_t free_after_op);
cham_status_t cham_exec_op_end(cham_context_t *ctx);
void cham_exec_forget(cham_context_t *ctx, cham_storage_t *s);

/* recompute.c: drops a storage that has a record (block reused in stream
 * order); CHAM_ERR_INVALID_ARG with the reason when it cannot be. */
cham_status_t cham_storage_drop(cham_storage_t *s);
/* recompute.c: runs the op of a dropped storage again (its inputs first:
 * brought back, or recomputed themselves). */
cham_status_t cham_storage_recompute(cham_storage_t *s, cham_swap_cause_t cause);
/* recompute.c, advisor mode: advises making dropped s again before the
 * op being begun (its inputs first: swapped in or made again); `needed`:
 * that op uses it. CHAM_ERR_INVALID_ARG, naming the input, when s is lost. */
cham_status_t cham_recompute_advise(cham_storage_t *s, bool needed);
/* recompute.c: before an op writes s: dropped dependents are recomputed
 * (they need s as it is), the others forgotten. */
cham_status_t cham_recompute_before_write(cham_storage_t *s);
/* recompute.c: the cost of making s again, if it can be and the caller
 * gave its op a cost, else a negative number. */
double cham_recompute_cost(const cham_storage_t *s);
/* recompute.c: an op has written s: its own record goes. */
void cham_recompute_written(cham_storage_t *s);
/* recompute.c: a view of s went, and s is still alive: if only the
 * runtime's own views are left and s can be made again from state that
 * outlives the step (a ZeRO-3 gathered weight), its memory goes. */
void cham_recompute_unviewed(cham_storage_t *s);
/* tensor.c: cham_tensor_release without the sweep of ghosts, for the
 * runtime's own views. */
void cham_view_release(cham_tensor_t *t);
/* The caller releases t, the last view of s: when a record that reads s
 * may need it again and s's own op can make it again from tensors alive
 * now, t is kept as s's ghost view (s is dropped, its memory back) and
 * true is returned; else false and t goes. Managed mode. */
bool cham_recompute_ghost(cham_storage_t *s, cham_tensor_t *t);
/* Releases the ghosts no record reads any more (their records' held views
 * with them): at op and step ends, and when the context goes. */
void cham_recompute_sweep_ghosts(cham_context_t *ctx);
/* recompute.c: s is being freed: its record and its dependents' go. */
void cham_recompute_storage_gone(cham_storage_t *s);

/* trials.c: a step's work: its ops' costs (cham_op_set_cost) with the
 * device's time per kernel beyond the cost; one formula for a profile's
 * and a running step's, so that steps alike have the same work. */
uint64_t cham_work_ns(uint64_t kernel_overhead_ns, size_t n_ops, double cost_ns);
/* loop.c: plans are shared by reference count. */
cham_plan_t *cham_plan_retain(cham_plan_t *plan);
void cham_plan_release(cham_plan_t *plan);
/* loop.c: after the stage machine ran at step end: generate, try, keep,
 * cache and pick the plan of the next step; may change the stage (a cache
 * hit goes straight to Stable). */
void cham_loop_step_end(cham_context_t *ctx, cham_stage_t from, cham_stage_t *to);
/* loop.c: a baseline planner (one policy from the first step, kept). */
bool cham_loop_static(const cham_context_t *ctx);

/* classes.c: the class of a step's sequence (canon its canonical one),
 * made when none is the same, has the same canonical sequence or is alike
 * (evicting the least recently used beyond config.policy_cache); NULL when
 * the host is out of memory. */
cham_class_t *cham_class_of(cham_context_t *ctx, const cham_op_token_t *seq, size_t len,
                            const cham_op_token_t *canon, size_t canon_len);
/* Counts a step of class c and adds it to the history. */
void cham_class_seen(cham_context_t *ctx, cham_class_t *c);
/* The class the next step should be: a class that recurs every k > 1
 * steps and is due (*period k, the longest such); else what most often
 * followed the earlier runs of classes equal to the last ones, the longest
 * such run that occurred before (for runs of two or more: followed by that
 * class at least twice and in most of its occurrences; *context its
 * length), NULL when none did; but from the 32nd step on, the most
 * frequent class (*context and *period 0) where that would have been
 * right more often in the last 32 steps. */
cham_class_t *cham_class_predict(cham_context_t *ctx, uint32_t *context, uint32_t *period);
cham_class_t *cham_class_by_id(cham_context_t *ctx, uint32_t id);
/* Forgets c's trials (releasing their plans). */
void cham_class_drop_trials(cham_class_t *c);
void cham_classes_free(cham_context_t *ctx);
/* loop.c: a policy under check in Stable is applied (its steps end
 * synchronized, to be timed). */
bool cham_loop_checking(const cham_context_t *ctx);
/* loop_classes.c: the policy applied was made again and is on probation
 * (its steps end synchronized, to be timed against the one before's). */
bool cham_loop_on_probation(const cham_context_t *ctx);
/* loop.c: frees the trials, the cache and the plans. */
void cham_loop_free(cham_context_t *ctx);
/* dispatch.c: the memory sample a swap happening now changes. */
uint32_t cham_dispatch_sample(const cham_context_t *ctx);
/* dispatch.c: profiles the step that is starting in detail. */
void cham_dispatch_start_profile(cham_context_t *ctx);
/* dispatch.c: logs a swap for the detailed profile. */
void cham_dispatch_note_swap(cham_context_t *ctx, cham_swap_kind_t kind, cham_storage_t *s,
                             bool passive, bool recompute);

#endif
