/* Training the GPT model on the eager runtime: the loop behind
 * `chameleon train` (docs/train.md).
 *
 * Each training step: a batch, the forward, the backward of the scaled
 * loss, the overflow check, then either the optimizer step (gradients
 * unscaled and clipped, AdamW) or, on overflow, a skipped step and a lower
 * loss scale. Every validate_every steps a forward-only step on held-out
 * data follows. With stochastic depth each step skips a seeded choice of
 * blocks. Each of these changes the op sequence the runtime sees. */
#ifndef CHAM_GPT_TRAIN_H
#define CHAM_GPT_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/chameleon.h"
#include "data.h"
#include "model.h"

/* The default smallest tensor worth swapping, for `train` and for `plan`
 * on the profiles it writes (docs/cli.md, "Option names"). */
#define GPT_MIN_SWAP_DEFAULT (UINT64_C(16) << 10)

typedef struct gpt_train_config {
    gpt_shape_t shape;           /* vocab is the data's */
    int steps;
    float lr, weight_decay, clip;
    uint64_t seed;
    const char *preset;          /* device preset (NULL: the default) */
    uint64_t budget;             /* device bytes; 0: the preset's capacity */
    double budget_fraction;      /* > 0: budget = this * the unconstrained peak */
    cham_strategy_t strategy;    /* any but CHAM_STRATEGY_IDEAL (CHAMELEON) */
    bool host_optimizer;         /* AdamW on the host (host_adam.h); the
                                    reference of verify keeps it on the device */
    bool verify;                 /* run an unconstrained copy alongside and compare */
    int validate_every;          /* 0: never */
    bool loss_scaling;
    const uint64_t *overflow_at; /* steps whose gradients get an injected inf */
    size_t n_overflow_at;
    double drop_prob;            /* stochastic depth: each block's skip chance */
    /* After training: greedy decoding of `generate` tokens (0: none) from
     * the first `prompt` tokens of a validation batch (decode.h), with the
     * KV caches offloaded to the host or not. With verify the reference
     * decodes too, its caches on the device, and the tokens must match. */
    int prompt, generate;
    bool kv_offload;
    uint64_t min_swap_bytes;     /* smallest tensor worth swapping (GPT_MIN_SWAP_DEFAULT) */
    cham_allocator_mode_t allocator; /* the device allocator's (CHAM_ALLOCATOR_AUTO) */
    bool log;                    /* the runtime's log lines to stderr */
    const char *trace_path;      /* the constrained run's timeline (chameleon/trace.h) */
    const char *profile_path;    /* its last step's detailed profile, as JSON */
    const char *policy_path;     /* the policy it applies at the end, as JSON */
    /* Called once at the end of the constrained run, before its context
     * goes (NULL: never), with its last step's detailed profile (NULL when
     * the run failed or made none) and the policy it applied at the end
     * (NULL: none), valid during the call only; setting it profiles the
     * last step, as profile_path does. */
    void (*on_finish)(const cham_profile_t *last_profile, const cham_policy_t *policy,
                      void *user);
    void *on_finish_user;
    /* Called once with the constrained run's context, before its first
     * step (NULL: never): lets a test install the runtime's hooks there,
     * e.g. cham_context_on_swap. The reference run gets no call. */
    void (*on_context)(cham_context_t *ctx, void *user);
    void *on_context_user;
} gpt_train_config_t;

/* Defaults: a small model on the synthetic data, every dynamic behaviour
 * on, the chameleon policy. */
gpt_train_config_t gpt_train_config_default(void);

/* What one step did; passed to the progress callback. */
typedef struct gpt_step_info {
    int step;                    /* 0-based training step */
    bool validation;             /* a forward-only step on held-out data */
    double loss;
    bool skipped_update;         /* overflow: no optimizer step */
    float loss_scale;
    int layers_skipped;
    cham_stage_t stage;          /* after the step */
    uint64_t peak_bytes;         /* device bytes held by tensors, at most, in the step */
    uint64_t budget;
    uint64_t swapped_bytes;      /* out and in, this step */
    uint64_t passive, on_demand; /* passive swap-outs, on-demand swap-ins, this step */
    bool stable;                 /* Stable before and after it */
    double sim_step_s;           /* simulated device time of the step */
    bool verified;               /* with verify: the loss equals the reference's */
} gpt_step_info_t;

typedef void (*gpt_progress_fn)(const gpt_step_info_t *info, void *user);

typedef struct gpt_train_result {
    int steps;
    double final_train_loss, final_val_loss;   /* NaN when none */
    double first_train_loss;
    uint64_t budget_bytes, unconstrained_peak_bytes, peak_device_bytes;
    bool verified, bit_exact;
    uint64_t hazards, oom, stage_changes, policy_regenerations, on_demand_swapins;
    uint64_t passive_swapouts;
    /* In the steps (training and validation) that ran Stable throughout:
     * the policy's misses. */
    uint64_t stable_steps, stable_passive, stable_on_demand;
    uint64_t skipped_updates, validations, layers_skipped;
    uint64_t swapped_bytes;
    uint64_t drops, recomputes;                /* tensors dropped, ops run again */
    double sim_time_s, ideal_time_s;           /* all steps, simulated */
    double sim_step_time_s, ideal_step_time_s; /* per training step */
    double overhead_vs_ideal;                  /* sim / ideal - 1 (NaN without ideal) */
    /* The ideal (unconstrained) training step on the sim, with --verify (0
     * otherwise): kernels launched, host time dispatching them (launches,
     * copies, event calls: the host not waiting) and device time computing
     * (all streams). Dispatch above compute means the step is launch-bound:
     * the device waits on the host, and any work Chameleon adds shows. */
    double ideal_kernels_per_step, ideal_dispatch_s_per_step, ideal_busy_s_per_step;
    double host_overhead_ratio;                /* CPU in Chameleon's calls / total,
                                                  both without the sim's byte copies */
    uint64_t param_count;
    /* protrain: the blocks' plan and its estimates (simulated), with every
     * chunk on the device. */
    bool has_protrain;
    cham_protrain_config_t protrain;
    double predicted_step_s;
    uint64_t predicted_peak_bytes;
    uint64_t largest_op_bytes;   /* the largest one op needs at once */
    int decoded;                 /* tokens generated per sequence */
    bool decode_bit_exact;       /* with verify: the reference chose the same */
    int32_t first_tokens[8];     /* the first sequence's first tokens chosen */
    char largest_op[32];         /* its name */
} gpt_train_result_t;

/* Trains. On failure returns the status and writes a message to err
 * (naming the step and what failed, e.g. the out-of-memory report). The
 * result holds what was measured up to the failure. */
cham_status_t gpt_train(const gpt_train_config_t *config, const gpt_data_t *data,
                        gpt_progress_fn progress, void *user, gpt_train_result_t *result,
                        char *err, size_t err_size);

#endif
