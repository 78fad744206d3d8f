/* Replaying an allocation trace (bench/lib/trace.h) through an allocator:
 * once checked and untimed (every block against the live ones, statistics
 * sampled after every operation for the fragmentation figures), and timed,
 * end to end or with a clock read at each switch between allocations and
 * frees. Each replay gets a fresh allocator and ends by freeing what the
 * trace left live and checking that the allocator is empty again.
 *
 * The allocators are entries of one table (replay_allocator_t); the same
 * replay loops serve them all. Problems stop the program with a message
 * and exit status 1. docs/bench.md explains the figures. */
#ifndef BENCH_LIB_REPLAY_H
#define BENCH_LIB_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/device.h"
#include "lib/trace.h"

#define REPLAY_ALIGN 512     /* first-fit rounding = the caching allocator's */

/* What every replay shares: the trace, the device, and the blocks. */
typedef struct replay_env {
    const bench_trace_t *trace;
    uint64_t capacity;       /* of the device and of the first-fit arena */
    bool check;              /* check blocks against the live ones */
    bool expandable;         /* the caching allocator in expandable-segments mode */
    cham_device_t *dev;      /* the sim device without data */
    cham_stream_t *streams[BENCH_TRACE_MAX_STREAMS];
    uint32_t *leftover;      /* slots the trace leaves live */
    size_t n_leftover;
    void **blocks;           /* per slot, the live blocks of the replay */
} replay_env_t;

/* What one allocator reports after an operation, for the samples. */
typedef struct replay_sample {
    uint64_t allocated, capacity;
    double fragmentation;    /* 1 - largest free block / free memory */
    uint64_t free_runs;      /* first-fit: entries in its free list */
    uint64_t vm_calls;       /* caching, expandable: map + unmap calls so far */
} replay_sample_t;

/* What one allocator reports after a replay. */
typedef struct replay_peaks {
    uint64_t peak_allocated, peak_reserved;
    uint64_t segments;       /* caching: segments obtained from the device */
    uint64_t vm_maps, vm_unmaps, vm_reclaims;   /* caching, expandable segments */
} replay_peaks_t;

/* One allocator as the replays see it. Every allocation and free of every
 * replay, checked or timed, goes through these pointers: the indirect call
 * costs both allocators the same, so the ratio of their times stays fair. */
typedef struct replay_allocator {
    const char *name;        /* "caching allocator", "first-fit" */
    bool hex_addresses;      /* check messages print addresses in hex */
    /* A fresh allocator; stops the program if there is none. */
    void *(*make)(const replay_env_t *env);
    /* Allocates op into *block; returns NULL, or why it failed. */
    const char *(*alloc)(void *a, const replay_env_t *env, const bench_op_t *op,
                         void **block);
    void (*free)(void *a, void *block);
    void (*sample)(void *a, replay_sample_t *s);
    /* [*lo, *lo + *size) of a new block; returns NULL if the block is what
     * op asked for, else a sentence why not, written into why. */
    const char *(*inspect)(const replay_env_t *env, const bench_op_t *op, void *block,
                           uint64_t *lo, uint64_t *size, char *why, size_t why_size);
    /* With every block freed: stops the program unless the allocator is
     * empty again and counted every operation; reports its peaks and
     * destroys it. */
    void (*finish)(void *a, const replay_env_t *env, replay_peaks_t *peaks);
} replay_allocator_t;

extern const replay_allocator_t replay_caching;    /* replay_caching.c */
extern const replay_allocator_t replay_firstfit;   /* replay_firstfit.c */

/* The figures of one allocator. */
typedef struct replay_result {
    /* checked replay */
    uint64_t peak_allocated, peak_reserved;
    double frag_at_peak;
    double frag_max;         /* over samples with free >= 10% of capacity */
    uint64_t frag_max_op;    /* operation index of frag_max */
    double frag_max_steps;   /* the same, only within the training steps */
    /* Per training step: fragmentation when the step's allocated peaked. */
    uint64_t step, step_peak;
    double step_peak_frag;
    double worst_step_frag;  /* the largest of those over all steps */
    uint64_t worst_step;
    uint64_t samples, samples_ok;
    uint64_t samples_over;   /* samples_ok above 10% fragmentation */
    uint64_t max_free_runs;  /* first-fit: longest free list */
    uint64_t segments;       /* caching: segments obtained from the device */
    uint64_t vm_maps, vm_unmaps, vm_reclaims;   /* caching, expandable segments */
    uint64_t vm_calls_setup;     /* map + unmap calls up to the first step's end */
    uint64_t vm_calls_max_step;  /* the most in one later training step */
    uint64_t vm_calls_mark;      /* calls counted at the last step's end */
    /* timed replays, one entry per repetition */
    double ns_op[100], ns_alloc[100], ns_free[100];
    uint64_t runs_alloc, runs_free;
} replay_result_t;

/* Opens the sim device of the given capacity with a stream per trace
 * stream, and the per-slot arrays. */
void replay_env_open(replay_env_t *env, const bench_trace_t *trace, uint64_t capacity,
                     bool expandable,
                     bool check);
void replay_env_close(replay_env_t *env);

/* The untimed replay: fills the figures of r other than the times. */
void replay_checked(const replay_env_t *env, const replay_allocator_t *alloc,
                    replay_result_t *r);
/* One timed replay, no clock read inside: ns for all operations. */
double replay_timed(const replay_env_t *env, const replay_allocator_t *alloc,
                    const replay_result_t *r);
/* One timed replay that reads the clock at each switch between allocations
 * and frees: r->ns_alloc[rep] and r->ns_free[rep], clock_ns taken off per
 * read. */
void replay_split(const replay_env_t *env, const replay_allocator_t *alloc,
                  replay_result_t *r, int rep, double clock_ns);

#endif
