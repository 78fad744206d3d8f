/* A detailed profile of one training step: what planners read.
 *
 * Ops in dispatch order with their phase, the tensors each reads and
 * writes (with the features used to recognise them in later steps), device
 * memory in use around each op, the step's duration and the swaps that
 * happened. From these the memory curve as if no swap had happened is
 * rebuilt (paper Fig. 3). Saved and loaded as JSON: docs/profile-format.md. */
#ifndef CHAMELEON_PROFILE_H
#define CHAMELEON_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/status.h"
#include "chameleon/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One use of a tensor by an op, with the tensor's features at that use. */
typedef struct cham_tensor_use {
    uint64_t storage;        /* storage id, unique within the profile */
    uint64_t data_ptr;       /* device address of the view at this use */
    uint64_t bytes;          /* bytes of the view */
    uint64_t storage_bytes;  /* bytes the storage holds on the device */
    cham_dtype_t dtype;
    uint32_t use_count;      /* uses of the storage before this one */
    uint64_t history;        /* indices (mod 256) of the ops of the last 8
                                uses, 8 bits each, newest in the low byte */
    bool output;             /* written by the op (else read) */
    bool persistent;         /* the storage existed before the step began and
                                still did when it ended (model state): it
                                may leave after its last use and come back
                                in the next step */
    bool host_backed;        /* after this use the caller's host copy holds the
                                storage's bytes (cham_tensor_set_host_copy):
                                sending it away copies nothing */
    bool overwrites;         /* written while its bytes were dead (never
                                written, or cham_tensor_discard): bringing it
                                back for this use copies nothing */
} cham_tensor_use_t;

/* One op. Its uses are uses[first_use .. first_use + n_uses). Memory is
 * the device bytes held by tensors at op begin and at op end. */
typedef struct cham_profile_op {
    cham_op_token_t token;
    cham_phase_t phase;
    int32_t block;           /* the transformer block (cham_set_block), -1: none */
    uint32_t first_use;
    uint32_t n_uses;
    uint64_t mem_before;
    uint64_t mem_after;
    bool recomputable;       /* declared with cham_op_set_recompute */
    bool has_cost;           /* the caller gave cost_ns (cham_op_set_cost) */
    double cost_ns;          /* the op's estimated compute-stream time */
    double comm_ns;          /* its collective's time on a communication
                                stream (cham_op_set_comm), 0: none */
    bool comm_waited;        /* the compute stream waits for that collective */
} cham_profile_op_t;

typedef enum cham_swap_kind {
    CHAM_SWAP_OUT,           /* device bytes released */
    CHAM_SWAP_IN,            /* device bytes taken again */
} cham_swap_kind_t;

/* A swap's effect on device memory: `bytes` left (OUT) or came back (IN)
 * at memory sample `sample` = 2 * op + (0: before the op, 1: after it). */
typedef struct cham_profile_swap {
    cham_swap_kind_t kind;
    uint64_t storage;
    uint64_t bytes;
    uint32_t sample;
    bool passive;            /* forced by an allocation failure, not planned */
    bool recompute;          /* dropped (OUT) or recomputed (IN), no copy */
    bool carried;            /* IN: the storage was already away when the
                                step began (it left in an earlier step) */
} cham_profile_swap_t;

/* The profile's parts; arrays are owned by the profile. */
typedef struct cham_profile_view {
    uint64_t step;           /* the step's number (cham_step_set_number) */
    uint64_t duration_ns;    /* host clock from step start to step end */
    uint64_t capacity;       /* device capacity */
    uint64_t kernel_overhead_ns; /* the device's time per kernel beyond its cost,
                                    when the costs leave it out (the sim's
                                    roofline costs); 0: none or unknown */
    uint64_t copy_latency_ns;    /* the device's time per copy beyond its bytes
                                    over the link's bandwidth; 0: none or
                                    unknown */
    size_t n_ops;
    const cham_profile_op_t *ops;
    size_t n_uses;
    const cham_tensor_use_t *uses;
    size_t n_swaps;
    const cham_profile_swap_t *swaps;
    size_t n_tokens;         /* names of tokens 0 .. n_tokens - 1 */
    const char *const *token_names;
} cham_profile_view_t;

CHAM_API void cham_profile_get(const cham_profile_t *p, cham_profile_view_t *view);

/* Memory in use at each of the 2 * n_ops samples (before and after each
 * op): as measured, and as it would have been without the swaps. Arrays
 * must hold 2 * n_ops values. */
CHAM_API void cham_profile_memory_curve(const cham_profile_t *p, uint64_t *actual,
                                        uint64_t *without_swaps);

CHAM_API cham_status_t cham_profile_save_json(const cham_profile_t *p, const char *path, char *err,
                                              size_t err_size);
/* On failure *out is NULL and err names the file and the position (line and
 * column for syntax, the JSON path of the field for content). */
CHAM_API cham_status_t cham_profile_load_json(const char *path, cham_profile_t **out, char *err,
                                              size_t err_size);
CHAM_API void cham_profile_free(cham_profile_t *p);

#ifdef __cplusplus
}
#endif

#endif
