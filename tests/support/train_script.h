/* A scripted, transformer-shaped training workload over the public runtime
 * API, for the executor's tests and bench. Each layer is a pre-norm block:
 *
 *   a = ln(x); qkv = a W_qkv (3x wide); y = attention(qkv); o = y W_o;
 *   x1 = x + o; b = ln(x1); f = b W_1 (4x wide); g = gelu(f); m = g W_2;
 *   x2 = x1 + m
 *
 * then a loss, the backward of every op in reverse order (gradients of
 * residuals accumulate), and an SGD step. Every op input is saved for the
 * backward, as autograd does. Kernels do integer work on real bytes in the
 * sim's data mode (deterministic, so runs compare bit for bit) and carry a
 * cost for the virtual timeline.
 *
 * Variations change a step without changing the program: an extra op that
 * reads an activation between its producer and its consumer, forward-only
 * (validation) steps, a skipped layer, a backward that visits the layers in
 * forward order (the same op tokens, so the policy is wrong for it), and a
 * scratch tensor of varying size that moves the layout from step to step. */
#ifndef CHAM_TESTS_TRAIN_SCRIPT_H
#define CHAM_TESTS_TRAIN_SCRIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/chameleon.h"

typedef struct ts_config {
    int layers;
    size_t act_bytes;            /* one hidden activation (x, a, y, ...) */
    size_t weight_bytes;         /* one weight matrix */
    double layer_flops;          /* FLOPs of one layer's forward */
    /* Variations: a step number (-1 = never) or a period (0 = never). */
    int64_t extra_op_step;       /* an extra op reads layer L/2's f before gelu does */
    uint32_t validate_every;     /* steps k*n - 1 are forward only */
    uint32_t eval_opens_every;   /* steps k*n - 1 (not forward only) begin with
                                    an evaluation: the forward and the loss */
    int64_t forward_only_step;   /* this step is forward only */
    int64_t reorder_step;        /* the backward visits layers 0 .. L-1 */
    int64_t skip_layer_step;     /* layer L/2 is skipped (stochastic depth): its
                                    ops are absent from forward and backward */
    bool shift_addresses;        /* a scratch tensor of 1-3 halves of an activation */
    bool adamw;                  /* AdamW, not SGD: two moments per weight, long-lived
                                    tensors of their own that only the update uses */
    bool mark_blocks;            /* each layer's ops are its block (cham_set_block) */
} ts_config_t;

/* 8 layers, 256 KiB activations, 64 KiB weights, no variation. */
ts_config_t ts_config_default(void);

typedef struct ts_model ts_model_t;

/* Makes the weights and gradients (deterministic contents). On failure
 * NULL; cham_context_last_error(ctx) says why. */
ts_model_t *ts_model_new(cham_context_t *ctx, const ts_config_t *c);
void ts_model_free(ts_model_t *m);

/* Runs step number `step`: ops, phases, step end. *checksum receives a hash
 * of the loss input and every weight after the step (meaningful in data
 * mode only). */
cham_status_t ts_step(ts_model_t *m, int64_t step, uint64_t *checksum);

#endif
