/* The trace builder (trace_builder.h), and bench_trace_release. */
#include "lib/trace_builder.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

#define MIN_CAP 1024


void trace_builder_init(trace_builder_t *b, bench_trace_t *t)
{
    memset(t, 0, sizeof *t);
    memset(b, 0, sizeof *b);
    b->t = t;
    t->n_streams = 1;
    t->min_bytes = UINT64_MAX;
}

void trace_builder_done(trace_builder_t *b)
{
    b->t->live_at_end = b->live_blocks;
    if (b->t->n_allocs == 0)
        b->t->min_bytes = 0;
    free(b->free_slots);
    free(b->slot_bytes);
    b->free_slots = NULL;
    b->slot_bytes = NULL;
}

static bool push_op(trace_builder_t *b, const bench_op_t *op)
{
    bench_trace_t *t = b->t;
    bench_op_t *ops = cham_grow(t->ops, &t->cap_ops, t->n_ops + 1, sizeof *ops, MIN_CAP);
    if (!ops) {
        b->failed = true;
        return false;
    }
    t->ops = ops;
    t->ops[t->n_ops++] = *op;
    return true;
}

uint32_t trace_builder_alloc(trace_builder_t *b, uint64_t bytes, int stream)
{
    bench_trace_t *t = b->t;
    if (b->failed)
        return UINT32_MAX;
    uint32_t slot;
    if (b->n_free > 0) {
        slot = b->free_slots[--b->n_free];
    } else {
        if (t->n_slots == UINT32_MAX - 1u) {
            b->failed = true;
            return UINT32_MAX;
        }
        slot = t->n_slots;
        uint64_t *sb = cham_grow(b->slot_bytes, &b->cap_slots, (size_t)slot + 1, sizeof *sb,
                                 MIN_CAP);
        if (!sb) {
            b->failed = true;
            return UINT32_MAX;
        }
        b->slot_bytes = sb;
        t->n_slots++;
    }
    bench_op_t op = {.bytes = bytes, .slot = slot, .kind = BENCH_OP_ALLOC,
                     .stream = (uint8_t)stream};
    if (!push_op(b, &op))
        return UINT32_MAX;
    b->slot_bytes[slot] = bytes;
    b->live_bytes += bytes;
    b->live_blocks++;
    t->n_allocs++;
    if (b->live_bytes > t->peak_live_bytes)
        t->peak_live_bytes = b->live_bytes;
    if (b->live_blocks > t->peak_live_blocks)
        t->peak_live_blocks = b->live_blocks;
    if (bytes < t->min_bytes)
        t->min_bytes = bytes;
    if (bytes > t->max_bytes)
        t->max_bytes = bytes;
    if (bytes <= ((uint64_t)1 << 20))
        t->allocs_small++;
    else if (bytes < ((uint64_t)10 << 20))
        t->allocs_mid++;
    else
        t->allocs_large++;
    if (stream != 0)
        t->allocs_stream1++;
    if (stream + 1 > t->n_streams)
        t->n_streams = stream + 1;
    return slot;
}

void trace_builder_free(trace_builder_t *b, uint32_t slot)
{
    bench_trace_t *t = b->t;
    if (b->failed || slot >= t->n_slots || b->slot_bytes[slot] == 0)
        return;
    uint32_t *fs = cham_grow(b->free_slots, &b->cap_free, b->n_free + 1, sizeof *fs, MIN_CAP);
    if (!fs) {
        b->failed = true;
        return;
    }
    b->free_slots = fs;
    bench_op_t op = {.bytes = 0, .slot = slot, .kind = BENCH_OP_FREE, .stream = 0};
    if (!push_op(b, &op))
        return;
    b->live_bytes -= b->slot_bytes[slot];
    b->live_blocks--;
    b->slot_bytes[slot] = 0;
    b->free_slots[b->n_free++] = slot;
    t->n_frees++;
}

void bench_trace_release(bench_trace_t *trace)
{
    if (!trace)
        return;
    free(trace->ops);
    free(trace->step_ends);
    memset(trace, 0, sizeof *trace);
}
