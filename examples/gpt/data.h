/* Training data for the GPT trainer: token sequences, a train/validation
 * split, and deterministic batches.
 *
 * The default data set is made here: a synthetic language whose sentences
 * count up from a random start by a stride of 1 to 4 (modulo the
 * vocabulary), with some noise. A model that reads the last two tokens can
 * predict the next one, so the loss falls visibly in a few hundred steps.
 * Any text file can be used instead, as bytes (a vocabulary of 256). The
 * last tenth of the tokens is held out for validation. */
#ifndef CHAM_GPT_DATA_H
#define CHAM_GPT_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct gpt_data {
    int32_t *tokens;
    size_t n;                /* tokens in all */
    size_t n_train;          /* the first n_train are for training, the rest validation */
    int vocab;
} gpt_data_t;

/* The synthetic language: n tokens over a vocabulary of vocab (>= 8) from
 * seed. 0 on success, -1 when the host is out of memory. */
int gpt_data_synthetic(gpt_data_t *d, size_t n, int vocab, uint64_t seed);

/* Data from bytes (a file's, read by the caller): one token per byte, a
 * vocabulary of 256. 0 on success, -1 when the host is out of memory. */
int gpt_data_from_bytes(gpt_data_t *d, const unsigned char *bytes, size_t n);

/* The longest sequence d can serve: both splits must hold seq tokens and
 * the one after them (-1 when a split is empty). gpt_data_batch needs
 * T <= this; gpt_train checks it. */
long gpt_data_max_seq(const gpt_data_t *d);
/* The fewest tokens data needs for sequences of seq tokens: 10 (seq + 1),
 * so that the validation tenth holds one. */
size_t gpt_data_min_tokens(int seq);

void gpt_data_free(gpt_data_t *d);

/* The batch of a step: B rows of T tokens and the T next tokens of each,
 * from the training or the validation part, at positions drawn from
 * (seed, step, row): the same arguments give the same batch. */
void gpt_data_batch(const gpt_data_t *d, int validation, uint64_t seed, uint64_t step, int B,
                    int T, int32_t *tokens, int32_t *targets);

#endif
