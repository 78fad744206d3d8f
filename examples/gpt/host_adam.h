/* The optimizer on the host (`chameleon train --optimizer host`, docs/train.md),
 * as ZeRO-Offload and ProTrain run it: AdamW's two moments and the fp32
 * master weights live in pinned host memory, never on the device. The
 * backward's gradients go to the host as each block finishes, on a copy
 * stream beside the compute stream; the host checks them (inf/NaN, the
 * squared norm for clipping), runs the unscale/clip and AdamW on a host
 * stream, and the updated weights come back to the device's parameters.
 *
 * The host runs the same kernels on the same floats in the same order as
 * the device optimizer, so training is bit for bit the same. AdamW cannot
 * start before the last gradient has arrived: clipping needs the global
 * norm and a loss-scale overflow anywhere skips the whole update. What
 * overlaps the backward is the gradients' way to the host. */
#ifndef CHAM_GPT_HOST_ADAM_H
#define CHAM_GPT_HOST_ADAM_H

#include <stdbool.h>
#include <stddef.h>

#include "ops.h"

typedef struct gpt_host_adam gpt_host_adam_t;

/* Pinned buffers for n floats each (gradients, master weights, moments),
 * the copy and host streams, and the master weights copied from params
 * (queued after the work that initialised them). On failure err says why,
 * e.g. a device whose figures have no host to time the host stream. */
cham_status_t gpt_host_adam_new(gpt_ops_t *ops, cham_tensor_t *params, size_t n,
                                gpt_host_adam_t **out, char *err, size_t err_size);
void gpt_host_adam_free(gpt_host_adam_t *h);

/* Queues the copy of floats [first, first + count) of grads to the host,
 * after the compute stream's work so far (their last write). */
cham_status_t gpt_host_adam_send(gpt_host_adam_t *h, cham_tensor_t *grads, size_t first,
                                 size_t count);

/* Once every gradient is sent: whether any is inf or NaN and, if none is,
 * the sum of their squares, as the device's check computes them. The host
 * waits for the answer. */
cham_status_t gpt_host_adam_check(gpt_host_adam_t *h, bool *overflow, double *sum_squares);

/* Makes the compute stream wait for the copies sent so far: call before
 * the device writes the gradients again (zeroing them). */
cham_status_t gpt_host_adam_fence(gpt_host_adam_t *h);

/* Scales the host's gradients by factor, one AdamW step on the master
 * weights with adam's hyperparameters (a GPT_ADAMW args; its pointers are
 * filled here), and queues their copy into params on the compute stream. */
cham_status_t gpt_host_adam_step(gpt_host_adam_t *h, cham_tensor_t *params, float factor,
                                 const gpt_args_t *adam);

/* Copies the master weights to host (n floats), after the host's work. */
cham_status_t gpt_host_adam_read_master(gpt_host_adam_t *h, float *host);

#endif
