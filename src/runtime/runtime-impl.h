/* The runtime's internals, shared by its source files:
 *
 *   context.c   context lifetime, streams, allocators, hooks, log, stats
 *   tensor.c    storages and views, reference counts, swap out and in
 *   dispatch.c  the op bracket, phases, step end, the profilers
 *   names.c     names of stages, phases and dtypes
 *   config.c    configuration and its JSON file */
#ifndef CHAM_RUNTIME_IMPL_H
#define CHAM_RUNTIME_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "chameleon/alloc.h"
#include "chameleon/profile.h"
#include "chameleon/runtime.h"
#include "common/intern.h"
#include "common/message.h"
#include "profile/stage.h"

typedef struct cham_storage cham_storage_t;

/* Bytes of one tensor's data, wherever it is.
 * Invariants: residency DEVICE or MOVING_IN iff block (managed) or ptr
 * (advisor) is set; HOST iff host_block is set and block is not; views > 0
 * while the storage is alive; in_event is set while a swap-in may still be
 * in flight (the compute stream has not waited on it yet); mem_counted says
 * whether bytes are in the context's mem_in_use. */
struct cham_storage {
    cham_context_t *ctx;
    uint64_t id;                  /* unique within the context */
    size_t bytes;
    cham_residency_t residency;
    cham_block_t *block;          /* managed: device memory */
    void *ptr;                    /* advisor: the caller's device memory */
    cham_block_t *host_block;     /* pinned copy while swapped out */
    cham_event_t *out_event;      /* completion of the last swap-out copy */
    cham_event_t *in_event;       /* completion of a swap-in not yet waited on */
    uint32_t views;
    /* Features for recognising the tensor across steps (paper appendix A). */
    uint32_t use_count;
    uint64_t history;             /* op indices (mod 256) of the last 8 uses */
};

/* Invariant: refs > 0 while the handle is alive; [offset, offset + bytes)
 * lies inside the storage. */
struct cham_tensor {
    cham_storage_t *storage;
    size_t offset, bytes;
    cham_dtype_t dtype;
    uint32_t refs;
    char label[48];
};

struct cham_context {
    cham_config_t config;
    cham_device_t *dev;
    cham_stream_t *compute, *swap_out, *swap_in;
    cham_allocator_t *mem;        /* managed: device memory */
    cham_allocator_t *pinned;     /* managed: pinned host memory for swaps */

    cham_intern_t tokens;

    /* The step being run. */
    uint64_t step;                /* steps ended */
    uint64_t ops_total;           /* ops dispatched since creation */
    uint32_t ops_in_step;         /* ops begun in this step */
    bool in_op;
    cham_phase_t phase;
    uint64_t step_start_ns;
    cham_op_token_t *seq;         /* lightweight profile: this step's tokens */
    size_t seq_cap;
    cham_stage_machine_t stages;

    /* Detailed profile. */
    bool detailed;                /* this step is profiled in detail */
    bool profile_requested;
    cham_profile_t *building;
    cham_profile_t *last_profile;
    bool profile_failed;          /* host OOM while building: dropped */

    uint64_t next_storage_id;
    uint64_t live_storages;
    cham_runtime_stats_t stats;

    cham_stage_hook_t stage_hook;
    void *stage_hook_user;
    cham_log_hook_t log_hook;
    void *log_hook_user;
    char error[512];
};

/* Records a failure message (printf-style) on the context. */
void cham_context_error(cham_context_t *ctx, const char *fmt, ...) CHAM_PRINTF(2, 3);
/* Writes a log line (printf-style) through the hook or to stderr. */
void cham_context_log(cham_context_t *ctx, const char *fmt, ...) CHAM_PRINTF(2, 3);

/* tensor.c: brings a storage used by the op being begun onto the device
 * and makes the compute stream wait for its swap-in. */
cham_status_t cham_storage_prepare(cham_storage_t *s);
/* dispatch.c: the memory sample a swap happening now changes. */
uint32_t cham_dispatch_sample(const cham_context_t *ctx);
/* dispatch.c: profiles the step that is starting in detail. */
void cham_dispatch_start_profile(cham_context_t *ctx);
/* dispatch.c: logs a swap for the detailed profile. */
void cham_dispatch_note_swap(cham_context_t *ctx, cham_swap_kind_t kind,
                             const cham_storage_t *s, bool passive);

#endif
