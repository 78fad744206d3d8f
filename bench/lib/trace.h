/* Allocation traces for the allocator benchmark, and the deterministic
 * generator of an LLM-like training trace (trace.c). Recorded traces are
 * read and written by trace_io.h.
 *
 * A trace is a list of operations: allocate `bytes` on stream `stream` into
 * slot `slot`, or free the block held in `slot`. Slots are small dense
 * indices (0 .. n_slots-1) reused after a free, so a replayer keeps its live
 * blocks in a plain array of n_slots entries. */
#ifndef BENCH_LIB_TRACE_H
#define BENCH_LIB_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BENCH_TRACE_MAX_STREAMS 16

typedef enum bench_op_kind {
    BENCH_OP_ALLOC = 0,
    BENCH_OP_FREE = 1,
} bench_op_kind_t;

/* One operation; 16 bytes so the replay loop streams through memory. */
typedef struct bench_op {
    uint64_t bytes;          /* ALLOC: bytes requested; FREE: 0 */
    uint32_t slot;           /* dense index of the block */
    uint8_t kind;            /* bench_op_kind_t */
    uint8_t stream;          /* ALLOC: stream index; FREE: 0 */
    uint16_t pad;
} bench_op_t;

typedef struct bench_trace {
    bench_op_t *ops;
    size_t n_ops, cap_ops;
    size_t n_allocs, n_frees;
    uint32_t n_slots;        /* slots ever used: replay arrays need this many */
    int n_streams;           /* 1 + highest stream used */
    uint64_t steps;          /* training steps generated (0 for a loaded trace) */
    size_t steps_begin, steps_end; /* generated: ops [begin, end) are the steps,
                                      before them setup, after them teardown */
    size_t *step_ends;       /* generated: step i ends before op step_ends[i] */
    uint64_t peak_live_bytes;/* highest sum of live requested bytes */
    uint64_t peak_live_blocks;
    uint64_t live_at_end;    /* blocks the trace leaves allocated */
    uint64_t min_bytes, max_bytes;
    uint64_t allocs_small;   /* allocations <= 1 MiB */
    uint64_t allocs_mid;     /* 1 MiB < bytes < 10 MiB */
    uint64_t allocs_large;   /* >= 10 MiB */
    uint64_t allocs_stream1; /* allocations on a stream other than 0 */
} bench_trace_t;

/* The model and run the generator imitates: a Llama-style decoder trained
 * with mixed-precision AdamW on one device. See docs/bench.md. */
typedef struct bench_trace_config {
    uint64_t seed;
    uint64_t min_ops;        /* whole steps are generated until >= this many ops */
    int layers;
    int hidden;              /* model width */
    int heads, kv_heads;     /* attention heads, key/value heads (GQA) */
    int ffn;                 /* dense FFN width (SwiGLU) */
    int vocab;
    int batch, seq;          /* micro-batch and the longest sequence */
    int moe_every;           /* every moe_every-th layer is MoE (0 = none) */
    int experts, top_k, expert_ffn;
    uint64_t bucket_bytes;   /* gradient all-reduce bucket, on stream 1 */
} bench_trace_config_t;

/* The default model (docs/bench.md) with the given seed and minimum ops. */
void bench_trace_config_default(bench_trace_config_t *config);

/* Generates the trace: parameters and optimizer states, then training
 * steps until at least config->min_ops operations, then a teardown that
 * frees everything. Returns false (with a message in err) only if the host
 * runs out of memory or the config is invalid. */
bool bench_trace_generate(const bench_trace_config_t *config, bench_trace_t *trace,
                          char *err, size_t err_size);

void bench_trace_release(bench_trace_t *trace);

#endif
