/* What the loop's files share (loop.c, plans.c, trials.c, loop_static.c,
 * loop_classes.c; runtime-impl.h has what the rest of the runtime calls). */
#ifndef CHAM_RUNTIME_LOOP_IMPL_H
#define CHAM_RUNTIME_LOOP_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/runtime-impl.h"

/* plans.c: a plan of policy for profile (taking the policy, freed on
 * failure; NULL out of host memory). With positional, its items are named
 * by (op index, i-th tensor), Capuchin's way. */
cham_plan_t *cham_plan_new(cham_policy_t *policy, const cham_profile_t *profile,
                           bool positional);
/* plans.c: applies plan from the next step on (NULL: none). */
void cham_loop_apply(cham_context_t *ctx, cham_plan_t *plan);

/* trials.c: frees Algorithm 1's GenPolicy trials. */
void cham_loop_trials_clear(cham_context_t *ctx);
/* trials.c: the release delay of trial k: 0, 1, 2, 4, 8, 16, ... */
uint32_t cham_loop_trial_delay(size_t k);
/* trials.c: trial k's plan from a step's profile, with the planner reserve
 * `reserve` (0: the default rule) and the model state its step must end
 * with on the device (n_resident sorted ids, the planner config's
 * resident_at_end); NULL (logged) if none can be made. *delay is the
 * release delay asked for, and on return the one planned. */
cham_plan_t *cham_loop_generate(cham_context_t *ctx, const cham_profile_t *profile, size_t k,
                                uint64_t reserve, const uint64_t *resident, size_t n_resident,
                                uint32_t *delay);
/* trials.c: ns of a step of work `from` as if it had work `to` (unchanged
 * where either is unknown, 0). */
uint64_t cham_loop_per_work(uint64_t ns, uint64_t to, uint64_t from);
/* trials.c: records in trials[k] how the step that applied it went, its
 * time as if the step had trials[0]'s plan's work; doubles *reserve after
 * a complete trial that needed passive swaps. */
void cham_loop_measure_trial(cham_context_t *ctx, cham_trial_t *trials, size_t k,
                             uint64_t step_ns, uint64_t *reserve);
/* Which measured trial cham_loop_best_trial keeps. */
typedef enum {
    CHAM_KEEP_CLEAN_CLOSE,        /* the fastest clean one when it is close to
                                     the fastest (cham_clean_is_close), else the
                                     fastest */
    CHAM_KEEP_CLEAN_FIRST,        /* the fastest clean one, if any */
    CHAM_KEEP_FASTEST,            /* the fastest */
} cham_keep_t;

/* trials.c: how class c's trials are kept: the fastest where its steps
 * vary (one canonical sequence), else `otherwise`; c may be NULL. */
cham_keep_t cham_loop_keep_for(const cham_class_t *c, cham_keep_t otherwise);
/* trials.c: the plan of the trial to keep of n measured; NULL when none
 * was measured. */
cham_plan_t *cham_loop_best_trial(cham_context_t *ctx, const cham_trial_t *trials, size_t n,
                                  cham_keep_t keep);

/* loop_static.c: the step end of a static planner (vDNN, Capuchin,
 * SwapAdvisor, HyperOffload); fresh is the step's profile if it was
 * profiled, else NULL. */
void cham_loop_static_end(cham_context_t *ctx, const cham_profile_t *fresh);

/* loop_classes.c: the class of the step that ended, counted in the
 * history (NULL with the cache off or out of host memory); turns the loop
 * to classes once a second sequence recurs where Algorithm 1 has not
 * settled. */
cham_class_t *cham_loop_class_of_step(cham_context_t *ctx);
/* loop.c: starts the check in Stable of `kept`, chosen from trials[0..n)
 * (of class c, or NULL); a check of another class not done yet ends, that
 * class keeping the best it measured. */
void cham_loop_check_start(cham_context_t *ctx, const cham_trial_t *trials, size_t n,
                           cham_plan_t *kept, cham_class_t *c);
/* loop_classes.c: the class c keeps plan from now on. */
void cham_loop_keep(cham_class_t *c, cham_plan_t *plan);
/* loop_classes.c: where class c's steps vary, the profile its trials are
 * made from: its heaviest step's so far, fresh (the step's profile, or
 * NULL) counted; elsewhere fresh. */
const cham_profile_t *cham_loop_trial_source(cham_class_t *c, const cham_profile_t *fresh);
/* loop_classes.c: a class's kept policy that the step that ended (begun
 * in stage from; fresh its profile or NULL) applied and that runs short on
 * heavier steps is made again from one of them (profiled when the class's
 * hunt_left is set). Returns that class (NULL: no kept policy applied). */
cham_class_t *cham_loop_cover_heavier(cham_context_t *ctx, cham_stage_t from,
                                      const cham_profile_t *fresh);
/* loop_classes.c: the step end in classes (the step was of class c and
 * began in stage from; fresh its profile or NULL): the kept policy it
 * applied made again if it runs short on heavier steps, its trial
 * measured, the next one made, and the
 * plan for the next step from the class predicted for it (*to Stable when
 * that is a kept policy; *sync when a trial must start from an idle
 * device). */
cham_plan_t *cham_loop_classes_end(cham_context_t *ctx, cham_class_t *c, cham_stage_t from,
                                   const cham_profile_t *fresh, cham_stage_t *to, bool *sync);

#endif
