/* ProTrain's planner (papers/protrain.txt §3): model states in chunks,
 * activations managed per transformer block, and a search over four
 * numbers with runtime and memory estimators built from one profile.
 *
 * A chunk is the weights one part of the model reads in the forward: the
 * ops before the first block (the embedding), each block, the ops after
 * the last (final norm and head), in execution order. The first n_persist
 * chunks are persistent: their weights, gradients and optimizer states
 * stay on the device and the device updates them. The others live on the
 * host: their weights are fetched into one of n_buffer chunk buffers
 * before use (the next one prefetched while the current one computes),
 * their gradients go to the host as the backward finishes each chunk, and
 * the host runs AdamW on them while the backward goes on.
 *
 * Each block keeps its activations (none), keeps its input only and runs
 * its forward again in the backward (checkpoint), or sends them to the
 * host after its forward and brings them back before its backward (swap),
 * in the interleaved layout of the paper's Figure 2. docs/protrain.md. */
#ifndef CHAMELEON_PROTRAIN_H
#define CHAMELEON_PROTRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/device.h"
#include "chameleon/profile.h"
#include "chameleon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The four numbers ProTrain's search tunes (§3.3). */
typedef struct cham_protrain_config {
    uint32_t n_persist;          /* chunks kept on the device, from the first */
    uint32_t n_buffer;           /* chunk buffers for the others */
    uint32_t n_swap;             /* blocks whose activations go to the host */
    uint32_t n_checkpoint;       /* blocks that keep their input only */
    uint32_t swap_interval;      /* N_interval, fixed before the search: the
                                    blocks' forward time a block's swap-out
                                    takes; swap blocks are at least this far
                                    apart, and a swap block's activations
                                    come back this many blocks before its
                                    backward (at least 1) */
} cham_protrain_config_t;

typedef enum cham_block_mode {
    CHAM_BLOCK_KEEP,             /* activations stay */
    CHAM_BLOCK_CHECKPOINT,       /* input kept, the forward runs again */
    CHAM_BLOCK_SWAP,             /* activations to the host and back */
} cham_block_mode_t;

/* Block b's mode (of n_blocks) in the interleaved layout: the first
 * n_swap + n_checkpoint blocks are managed, swap blocks spread evenly
 * among them from the first (each followed by its share of checkpoint
 * blocks), the later blocks keep theirs. */
CHAM_API cham_block_mode_t cham_protrain_block_mode(const cham_protrain_config_t *c,
                                                    uint32_t n_blocks, uint32_t b);
CHAM_API const char *cham_block_mode_name(cham_block_mode_t mode);
/* How many blocks before its backward a swapped block's activations come
 * back (and how many blocks' forward its swap-out is given): swap_interval,
 * at least 1. The estimators and every runtime use this one rule. */
CHAM_API uint32_t cham_protrain_swap_ahead(const cham_protrain_config_t *c);

/* What the estimators need beyond the profile: the device and its host;
 * and what the caller allows the search. */
typedef struct cham_protrain_device {
    uint64_t capacity;           /* device bytes */
    uint64_t reserve;            /* kept free (fragmentation, workspace);
                                    UINT64_MAX: the planners' default rule
                                    (docs/policy.md) */
    double h2d_bandwidth, d2h_bandwidth;    /* bytes/s */
    double host_flops, host_mem_bandwidth;  /* the host's share (AdamW) */
    /* Per op (0: none): the host's time to dispatch it and the device's
     * fixed time per kernel beyond the op's cost; a small model's step is
     * set by the host's dispatch, not its kernels. */
    uint64_t launch_ns, kernel_ns;
    uint32_t min_persist;        /* the search keeps at least this many chunks
                                    on the device (a caller whose parameters
                                    cannot move: all of them; then the host's
                                    figures are not needed) */
} cham_protrain_device_t;

/* A device's figures (chameleon/device.h), the planners' default
 * reserve, no chunk held on the device. */
CHAM_API cham_protrain_device_t cham_protrain_device_of(const cham_device_info_t *info);

/* One profile's structure as ProTrain sees it. */
typedef struct cham_protrain_model cham_protrain_model_t;

/* Reads the blocks, chunks and segments from a detailed profile of one
 * training step with every chunk persistent and every block kept (the
 * profiled job's own step), the segments timed on dev (its launch_ns and
 * kernel_ns; the rest is the search's). Needs ops marked with
 * cham_set_block, forward before backward, each block's forward and
 * backward ops contiguous; otherwise CHAM_ERR_INVALID_ARG with err naming
 * the op and what is wrong. */
CHAM_API cham_status_t cham_protrain_model_new(const cham_profile_t *profile,
                                               const cham_protrain_device_t *dev,
                                               cham_protrain_model_t **out, char *err,
                                               size_t err_size);
CHAM_API void cham_protrain_model_free(cham_protrain_model_t *m);
CHAM_API uint32_t cham_protrain_blocks(const cham_protrain_model_t *m);
CHAM_API uint32_t cham_protrain_chunks(const cham_protrain_model_t *m);

/* The estimators: one configuration's step time and peak device bytes
 * held by tensors. CHAM_ERR_INVALID_ARG for a configuration out of range
 * (err says which number). */
typedef struct cham_protrain_estimate {
    double step_ns;
    uint64_t peak_bytes;
    bool fits;                   /* peak_bytes <= capacity - reserve */
} cham_protrain_estimate_t;

CHAM_API cham_status_t cham_protrain_estimate(const cham_protrain_model_t *m,
                                              const cham_protrain_device_t *dev,
                                              const cham_protrain_config_t *c,
                                              cham_protrain_estimate_t *out, char *err,
                                              size_t err_size);

/* The search: the configuration of the shortest estimated step among
 * those that fit. CHAM_ERR_OUT_OF_MEMORY when none fits (err names the
 * smallest estimated peak and the capacity). */
typedef struct cham_protrain_plan {
    cham_protrain_config_t config;
    cham_protrain_estimate_t estimate;
    uint64_t evaluated;          /* configurations whose step was estimated */
    uint64_t pruned;             /* configurations discarded: by memory, by
                                    the spacing of swap blocks, or by a bound
                                    above the best step found */
} cham_protrain_plan_t;

CHAM_API cham_status_t cham_protrain_search(const cham_protrain_model_t *m,
                                            const cham_protrain_device_t *dev,
                                            cham_protrain_plan_t *out, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif

#endif
