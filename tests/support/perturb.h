/* The perturbation harness (issue 14): a seeded random training-like
 * program run through the runtime twice in the sim's data mode with the
 * hazard detector on, once on an unconstrained device and once under a
 * budget of 20-100 % of that run's peak, and compared op by op.
 *
 * A seed fixes everything: the program (parameters and other tensors the
 * host makes and fills outside ops, a forward whose activations the
 * backward reads, views at offsets with their own dtypes, in-place ops,
 * temporaries freed early, workspaces allocated inside ops, sizes from a
 * few bytes to a MiB), the perturbations of each step (ops inserted,
 * deleted, swapped with an independent neighbour; validation, gradient
 * accumulation, skipped updates, skipped layers, a shuffled backward,
 * tensors whose size changes every step), the runtime's knobs (executor
 * mode, warm-up and GenPolicy lengths, min_swap_bytes, the policy cache, the
 * sim's link speeds and launch queue) and the budget. docs/testing.md says
 * how it works and how to run it. */
#ifndef CHAM_TESTS_PERTURB_H
#define CHAM_TESTS_PERTURB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum pt_mode {
    PT_MODE_SEED = -1,           /* chosen by the seed */
    PT_MODE_CHAMELEON = 0,       /* free-after-op (custom recordStream) */
    PT_MODE_PYTORCH = 1,         /* pytorch_record_stream */
} pt_mode_t;

typedef enum pt_verdict {
    PT_CLEAN,                    /* every step ran, bit-exact, no hazard */
    PT_CLEAN_OOM,                /* stopped by a clear out-of-memory error at a
                                    budget below twice the working-set bound */
    PT_CLEAN_OOM_FRAGMENTED,     /* a workspace inside an op found the bytes free
                                    but split by the op's own operands, which
                                    cannot move while it runs (issue 16) */
    PT_FAIL_MISMATCH,            /* an op read other bytes than the reference */
    PT_FAIL_HAZARD,              /* the sim's hazard detector fired */
    PT_FAIL_NO_ADDRESS,          /* an op began with an operand not on the device */
    PT_FAIL_ERROR,               /* a status other than OK or out-of-memory */
    PT_FAIL_OOM_MESSAGE,         /* out of memory without a message naming bytes */
    PT_FAIL_OOM_ABOVE,           /* out of memory at a budget >= 2x the bound */
    PT_FAIL_REFERENCE,           /* the unconstrained run itself failed */
    PT_FAIL_CRASH,               /* the run died (assertion, signal, sanitizer) */
    PT_CLEAN_STATIC,             /* Capuchin's static policy refused a changed
                                    step with its clear error */
    PT_VERDICT_COUNT_
} pt_verdict_t;

const char *pt_verdict_name(pt_verdict_t v);
bool pt_verdict_ok(pt_verdict_t v);

typedef struct pt_options {
    uint64_t seed;
    pt_mode_t mode;
    double fraction;             /* > 0: this budget fraction, not the seed's */
    /* Negative control: flips one byte that the first swap-in of a
     * parameter brought back, as if its host copy were corrupt. */
    bool corrupt_param_swap_in;
    bool verbose;                /* the runtime's log lines to stderr */
} pt_options_t;

typedef struct pt_result {
    pt_verdict_t verdict;
    pt_mode_t mode;
    int steps;                   /* steps in the program (plus a final read) */
    int steps_run;               /* steps the constrained run finished */
    uint64_t ops;                /* ops the constrained run dispatched */
    double fraction;
    uint64_t peak;               /* the unconstrained run's peak, bytes */
    uint64_t budget;             /* the constrained device's capacity */
    uint64_t bound;              /* the largest single op's bytes */
    char bound_op[16];           /* its name */
    uint64_t hazards;
    uint64_t swaps_out, swaps_in, planned_swaps_out, passive_swaps_out;
    uint64_t on_demand_swaps_in, policies_generated, policy_cache_hits;
    uint64_t drops, recomputes;  /* tensors dropped, ops run again */
    int steps_stable;            /* steps run with the stage Stable */
    bool corrupted;              /* the negative control did flip a byte */
    double seconds;              /* wall clock of both runs */
    char detail[640];            /* what went wrong, one line */
    char program[320];           /* what the seed made, one line */
} pt_result_t;

/* Runs one seed: the unconstrained run, then the constrained one. */
void pt_run_seed(const pt_options_t *o, pt_result_t *r);

#endif
