/* Greedy decoding with the GPT model and a KV cache per block, one
 * position per runtime step, as a serving loop runs it (docs/train.md,
 * "Decoding").
 *
 * Each step embeds one token per sequence at its position, and each block
 * writes that position's keys and values into its cache and attends over
 * the cache's rows so far; the kernels compute a position exactly as the
 * training forward does. The prompt's tokens are fed one per step (the
 * prefill); from the prompt's last one on, the head's greedy choice is
 * read back (as .item() does) and fed to the next step.
 *
 * With kv_offload the caches live in pinned host memory and move through
 * HyperOffload's three cache operators in every block: Prefetch copies the
 * rows so far into a device tensor (after the block's last Store), Store
 * copies the new row back on a copy stream, and Detach releases the device
 * tensor, which the allocator keeps until the Store has read it. Without
 * it each block's cache is one device tensor that lives across steps. */
#ifndef CHAM_GPT_DECODE_H
#define CHAM_GPT_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct gpt_decode_config {
    int prompt;                  /* prompt tokens per sequence, >= 1 */
    int generate;                /* tokens to generate, >= 1; prompt + generate
                                    - 1 positions must fit the model's seq */
    bool kv_offload;
} gpt_decode_config_t;

/* Whether c's lengths fit shape s; if not, err names the field. */
bool gpt_decode_check(const gpt_shape_t *s, const gpt_decode_config_t *c, char *err,
                      size_t err_size);

/* Decodes the model's batch of sequences: prompt holds batch x
 * c->prompt tokens (row-major), out gets batch x c->generate. Each
 * position ends a runtime step. On failure err says why (bad lengths name
 * the field). */
cham_status_t gpt_decode(gpt_model_t *m, const gpt_decode_config_t *c, const int32_t *prompt,
                         int32_t *out, char *err, size_t err_size);

#endif
