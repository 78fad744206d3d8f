/* Inside bench/lib: the builder every trace goes through, generated or
 * loaded. It appends operations, hands out dense slots (the most recently
 * freed first, else a new one) and keeps the summary statistics of
 * bench_trace_t. */
#ifndef BENCH_LIB_TRACE_BUILDER_H
#define BENCH_LIB_TRACE_BUILDER_H

#include "common/message.h"
#include "lib/trace.h"

/* Invariants: slot_bytes[s] > 0 iff slot s is live; free_slots holds
 * exactly the slots < n_slots that are not live; live_bytes is the sum of
 * slot_bytes. */
typedef struct trace_builder {
    bench_trace_t *t;
    uint32_t *free_slots;
    size_t n_free, cap_free;
    uint64_t *slot_bytes;
    size_t cap_slots;
    uint64_t live_bytes, live_blocks;
    bool failed;             /* the host ran out of memory */
} trace_builder_t;

/* Starts an empty trace t. */
void trace_builder_init(trace_builder_t *b, bench_trace_t *t);
/* Completes the statistics and frees the builder's own arrays. */
void trace_builder_done(trace_builder_t *b);
/* Appends an allocation; returns its slot, or UINT32_MAX once the host has
 * run out of memory (b->failed). */
uint32_t trace_builder_alloc(trace_builder_t *b, uint64_t bytes, int stream);
/* Appends the free of slot, if it is live. */
void trace_builder_free(trace_builder_t *b, uint32_t slot);


#endif
