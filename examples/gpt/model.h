/* A GPT-2-style decoder-only transformer on the eager runtime: token and
 * position embeddings, pre-norm blocks (layer norm, causal multi-head
 * attention, residual, layer norm, GELU MLP, residual), a final layer norm
 * and the output projection tied to the token embedding, cross-entropy.
 *
 * Every operator is dispatched through the runtime (ops.h). Every
 * activation saved for the backward is a tensor handle that Chameleon may
 * swap; the model never keeps a data pointer across ops. Parameters,
 * gradients and AdamW's moments are four flat storages (gradients and
 * parameters with a view per weight), as fused optimizers keep them. */
#ifndef CHAM_GPT_MODEL_H
#define CHAM_GPT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops.h"

typedef struct gpt_shape {
    int vocab, seq, layers, hidden, heads, batch;
} gpt_shape_t;

typedef struct gpt_model gpt_model_t;

/* Checks the shape; on failure a message names the field. Beyond each
 * field's range: batch x seq must fit an int, and a training step at most
 * 2^50 bytes (gpt_model_bytes). */
int gpt_shape_check(const gpt_shape_t *s, char *err, size_t err_size);

/* The host bytes one unconstrained training step of shape s holds at its
 * peak, at least: parameters, gradients and AdamW's two moments, and the
 * activations the forward keeps for the backward (4 bytes each). In double
 * precision: any shape gives a finite number. */
double gpt_model_bytes(const gpt_shape_t *s);

/* Makes and initialises the parameters from seed (ops on the device).
 * With host_optimizer, AdamW's moments and the master weights live in
 * pinned host memory and the optimizer step runs on the host
 * (host_adam.h); the results are bit for bit the same. On failure err
 * says why. */
cham_status_t gpt_model_new(gpt_ops_t *ops, const gpt_shape_t *shape, uint64_t seed,
                            bool host_optimizer, gpt_model_t **out, char *err,
                            size_t err_size);
/* Full activation recomputation: a training forward keeps each block's
 * input only; the block's backward first runs its forward again. The
 * kernels are deterministic, so results are bit for bit the same. */
void gpt_model_set_recompute(gpt_model_t *m, bool on);
/* ProTrain's block layout (chameleon/protrain.h): which blocks keep their
 * input only and run their forward again, which send what they keep to
 * the host after their forward and bring it back swap_interval blocks
 * before their backward. The chunk fields are not the model's: its
 * parameters are one storage, always on the device. */
void gpt_model_set_blocks(gpt_model_t *m, const cham_protrain_config_t *c);
void gpt_model_free(gpt_model_t *m);

size_t gpt_param_count(const gpt_model_t *m);

/* The forward of one batch (host tokens and targets, B*T each). skip[l]
 * skips block l (stochastic depth; NULL: none). With training, the
 * activations the backward needs are kept. *loss is the mean cross-entropy,
 * read back to the host as a framework's loss.item() does. */
cham_status_t gpt_forward(gpt_model_t *m, const int32_t *tokens, const int32_t *targets,
                          const bool *skip, bool training, double *loss);

/* The backward of the last training forward, of loss_scale * loss:
 * gradients accumulate into the flat gradient storage. */
cham_status_t gpt_backward(gpt_model_t *m, float loss_scale);

/* Writes +inf into the first gradient (an injected overflow). */
cham_status_t gpt_inject_overflow(gpt_model_t *m);

/* Reads back whether any gradient is inf or NaN and, if none is, the sum
 * of their squares. */
cham_status_t gpt_check_grads(gpt_model_t *m, bool *overflow, double *sum_squares);

/* Multiplies the gradients by factor (unscaling and clipping in one), then
 * one AdamW step (t is 1-based), then zeroes the gradients. */
cham_status_t gpt_optimizer_step(gpt_model_t *m, float factor, int t, float lr,
                                 float weight_decay);

/* Zeroes the gradients (after a skipped step). */
cham_status_t gpt_zero_grads(gpt_model_t *m);

/* With the host optimizer: copies its master weights (param_count floats),
 * after its work so far; CHAM_ERR_INVALID_ARG without. */
cham_status_t gpt_read_master(gpt_model_t *m, float *host);

/* Copies the parameters to host memory (param_count floats). */
cham_status_t gpt_read_params(gpt_model_t *m, float *host);

/* The weights, for code that runs the model outside this file (decode.h):
 * a block's (layer >= 0) in the order below, or the whole model's
 * (layer -1): GPT_WTE, GPT_WPE, GPT_LNFW, GPT_LNFB. Views of the flat
 * parameter storage. */
enum { GPT_LN1W, GPT_LN1B, GPT_QKVW, GPT_QKVB, GPT_PROJW, GPT_PROJB, GPT_LN2W, GPT_LN2B,
       GPT_FCW, GPT_FCB, GPT_FCPROJW, GPT_FCPROJB, GPT_PER_LAYER };
enum { GPT_WTE, GPT_WPE, GPT_LNFW, GPT_LNFB };
cham_tensor_t *gpt_model_weight(const gpt_model_t *m, int layer, int k);
/* A new float tensor of the model's, labelled "l<layer>.<name>" (layer -1:
 * "<name>"). */
cham_status_t gpt_model_act(gpt_model_t *m, size_t floats, const char *name, int layer,
                            cham_tensor_t **out);
const gpt_shape_t *gpt_model_shape(const gpt_model_t *m);
gpt_ops_t *gpt_model_ops(const gpt_model_t *m);
#endif
