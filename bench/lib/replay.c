/* The checked and timed replays of a trace over the allocator table
 * (replay.h), the fragmentation samples, and the replay environment. */
#include "lib/replay.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/live_set.h"
#include "lib/machine.h"

static void out_of_host_memory(void)
{
    fprintf(stderr, "bench_alloc: out of host memory\n");
    exit(1);
}

/* ---- environment --------------------------------------------------------------*/
void replay_env_open(replay_env_t *env, const bench_trace_t *t, uint64_t capacity,
                     bool expandable, bool check)
{
    *env = (replay_env_t){.trace = t, .capacity = capacity, .check = check,
                          .expandable = expandable};
    /* Slots left live at the end of the trace, freed after each replay. */
    bool *live = calloc(t->n_slots ? t->n_slots : 1, sizeof *live);
    env->leftover = malloc((t->live_at_end ? t->live_at_end : 1) * sizeof *env->leftover);
    env->blocks = calloc(t->n_slots ? t->n_slots : 1, sizeof *env->blocks);
    if (!live || !env->leftover || !env->blocks)
        out_of_host_memory();
    for (size_t i = 0; i < t->n_ops; i++)
        live[t->ops[i].slot] = t->ops[i].kind == BENCH_OP_ALLOC;
    for (uint32_t s = 0; s < t->n_slots; s++)
        if (live[s])
            env->leftover[env->n_leftover++] = s;
    free(live);

    cham_device_config_t dc = cham_device_config_default();
    dc.capacity = capacity;
    dc.data = false;
    dc.hazard_check = false;     /* no kernels are launched */
    cham_status_t st = cham_device_open(&dc, &env->dev);
    if (st != CHAM_OK) {
        fprintf(stderr, "bench_alloc: cannot open the sim device: %s: %s\n",
                cham_status_string(st), cham_device_last_error(NULL));
        exit(1);
    }
    for (int i = 0; i < t->n_streams; i++) {
        char name[32];
        if (i < 2)
            snprintf(name, sizeof name, "%s", i == 0 ? "compute" : "comm");
        else
            snprintf(name, sizeof name, "stream%d", i);
        st = cham_stream_new(env->dev, name, &env->streams[i]);
        if (st != CHAM_OK) {
            fprintf(stderr, "bench_alloc: cannot create stream %d: %s: %s\n", i,
                    cham_status_string(st), cham_device_last_error(env->dev));
            exit(1);
        }
    }
}

void replay_env_close(replay_env_t *env)
{
    for (int i = 0; i < env->trace->n_streams; i++)
        cham_stream_free(env->streams[i]);
    cham_device_close(env->dev);
    free(env->leftover);
    free(env->blocks);
}

/* ---- failures -----------------------------------------------------------------*/
static void fail_op(const char *who, const replay_env_t *env, size_t i, const char *msg)
{
    const bench_op_t *op = &env->trace->ops[i];
    fprintf(stderr,
            "bench_alloc: %s: operation %zu (allocate %" PRIu64 " bytes on stream %u) "
            "failed: %s\n",
            who, i + 1, op->bytes, (unsigned)op->stream, msg);
    exit(1);
}

static void fail_check(const char *who, size_t i, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_alloc: %s: CHECK FAILED at operation %zu: ", who, i + 1);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* "[lo, hi)", in hex or decimal. */
static const char *range_text(char *buf, size_t size, uint64_t lo, uint64_t hi, bool hex)
{
    if (hex)
        snprintf(buf, size, "[%#" PRIx64 ", %#" PRIx64 ")", lo, hi);
    else
        snprintf(buf, size, "[%" PRIu64 ", %" PRIu64 ")", lo, hi);
    return buf;
}

/* A new block must be what op asked for and disjoint from the live ones;
 * it joins them. */
static void check_block(const replay_env_t *env, const replay_allocator_t *A, live_set_t *live,
                        size_t i, void *block)
{
    const bench_op_t *op = &env->trace->ops[i];
    char why[512], mine[64], theirs[64];
    uint64_t lo, size;
    if (A->inspect(env, op, block, &lo, &size, why, sizeof why))
        fail_check(A->name, i, "%s", why);
    uint32_t other = live_set_add(live, op->slot, lo, size);
    if (other != LIVE_SET_NONE)
        fail_check(A->name, i, "block %s overlaps live block %s",
                   range_text(mine, sizeof mine, lo, lo + size, A->hex_addresses),
                   range_text(theirs, sizeof theirs, live->lo[other], live->hi[other],
                              A->hex_addresses));
}

/* Frees what the trace left live; the allocator checks that it is empty
 * again and is destroyed. */
static replay_peaks_t finish(const replay_env_t *env, const replay_allocator_t *A, void *a)
{
    for (size_t k = 0; k < env->n_leftover; k++)
        A->free(a, env->blocks[env->leftover[k]]);
    replay_peaks_t p;
    A->finish(a, env, &p);
    return p;
}

/* A timed replay must reach the peak of the checked one. */
static void finish_timed(const replay_env_t *env, const replay_allocator_t *A, void *a,
                         const replay_result_t *r)
{
    replay_peaks_t p = finish(env, A, a);
    if (p.peak_allocated != r->peak_allocated) {
        fprintf(stderr, "bench_alloc: %s: timed replay reached a peak of %" PRIu64
                " bytes, the checked replay %" PRIu64 ": not deterministic\n",
                A->name, p.peak_allocated, r->peak_allocated);
        exit(1);
    }
}

/* ---- checked replay -------------------------------------------------------------*/
/* Sample after one operation: fragmentation at the first moment allocated
 * reaches its peak, and the maximum over samples where at least 10% of the
 * capacity is free. */
static void sample(replay_result_t *r, const bench_trace_t *t, uint64_t i, uint64_t allocated,
                   uint64_t capacity, double frag, uint64_t vm_calls)
{
    r->samples++;
    if (allocated > r->peak_allocated) {
        r->peak_allocated = allocated;
        r->frag_at_peak = frag;
    }
    if ((capacity - allocated) * 10 >= capacity) {
        r->samples_ok++;
        r->samples_over += frag > 0.10;
        if (frag > r->frag_max) {
            r->frag_max = frag;
            r->frag_max_op = i;
        }
        if (i >= t->steps_begin && i < t->steps_end && frag > r->frag_max_steps)
            r->frag_max_steps = frag;
    }
    if (i < t->steps_begin || r->step >= t->steps)
        return;
    if (allocated > r->step_peak) {
        r->step_peak = allocated;
        r->step_peak_frag = frag;
    }
    if (i + 1 == t->step_ends[r->step]) {
        /* Map calls: the first step grows the segments to the peak, once;
         * a later step's calls are what a long run pays every step. */
        if (r->step == 0)
            r->vm_calls_setup = vm_calls;
        else if (vm_calls - r->vm_calls_mark > r->vm_calls_max_step)
            r->vm_calls_max_step = vm_calls - r->vm_calls_mark;
        r->vm_calls_mark = vm_calls;
        if (r->step_peak_frag > r->worst_step_frag) {
            r->worst_step_frag = r->step_peak_frag;
            r->worst_step = r->step;
        }
        r->step++;
        r->step_peak = 0;
    }
}

void replay_checked(const replay_env_t *env, const replay_allocator_t *A, replay_result_t *r)
{
    const bench_trace_t *t = env->trace;
    void *a = A->make(env);
    live_set_t live;
    if (env->check && !live_set_init(&live, t->n_slots))
        out_of_host_memory();
    for (size_t i = 0; i < t->n_ops; i++) {
        const bench_op_t *op = &t->ops[i];
        if (op->kind == BENCH_OP_ALLOC) {
            const char *why = A->alloc(a, env, op, &env->blocks[op->slot]);
            if (why)
                fail_op(A->name, env, i, why);
            if (env->check)
                check_block(env, A, &live, i, env->blocks[op->slot]);
        } else {
            if (env->check)
                live_set_remove(&live, op->slot);
            A->free(a, env->blocks[op->slot]);
        }
        replay_sample_t s;
        A->sample(a, &s);
        sample(r, t, i, s.allocated, s.capacity, s.fragmentation, s.vm_calls);
        if (s.free_runs > r->max_free_runs)
            r->max_free_runs = s.free_runs;
    }
    if (env->check)
        live_set_release(&live);
    replay_peaks_t p = finish(env, A, a);
    r->peak_reserved = p.peak_reserved;
    r->segments = p.segments;
    r->vm_maps = p.vm_maps;
    r->vm_unmaps = p.vm_unmaps;
    r->vm_reclaims = p.vm_reclaims;
    if (p.peak_allocated != r->peak_allocated) {
        fprintf(stderr, "bench_alloc: %s: peak_allocated %" PRIu64 " but the sampled peak is %"
                PRIu64 "\n", A->name, p.peak_allocated, r->peak_allocated);
        exit(1);
    }
}

/* ---- timed replays ---------------------------------------------------------------*/
/* Operations [i, end) of the trace, nothing else: the loop every timed
 * replay runs, inlined into both. */
static inline void run_ops(const replay_env_t *env, const replay_allocator_t *A, void *a,
                           size_t i, size_t end)
{
    const bench_op_t *ops = env->trace->ops;
    void **blocks = env->blocks;
    for (; i < end; i++) {
        const bench_op_t *op = &ops[i];
        if (op->kind == BENCH_OP_ALLOC) {
            const char *why = A->alloc(a, env, op, &blocks[op->slot]);
            if (why)
                fail_op(A->name, env, i, why);
        } else {
            A->free(a, blocks[op->slot]);
        }
    }
}

double replay_timed(const replay_env_t *env, const replay_allocator_t *A,
                    const replay_result_t *r)
{
    void *a = A->make(env);
    uint64_t t0 = bench_now_ns();
    run_ops(env, A, a, 0, env->trace->n_ops);
    uint64_t t1 = bench_now_ns();
    finish_timed(env, A, a, r);
    return (double)(t1 - t0);
}

/* Time per kind: the clock is read whenever the trace switches between
 * allocations and frees; acc[kind] collects the runs of that kind. */
void replay_split(const replay_env_t *env, const replay_allocator_t *A, replay_result_t *r,
                  int rep, double clock_ns)
{
    const bench_trace_t *t = env->trace;
    const bench_op_t *ops = t->ops;
    size_t n = t->n_ops;
    uint64_t acc[2] = {0, 0}, runs[2] = {0, 0};
    void *a = A->make(env);
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0, end; i < n; i = end) {
        unsigned kind = ops[i].kind;
        for (end = i + 1; end < n && ops[end].kind == kind; end++)
            continue;
        run_ops(env, A, a, i, end);
        uint64_t t1 = bench_now_ns();
        acc[kind] += t1 - t0;
        runs[kind]++;
        t0 = t1;
    }
    finish_timed(env, A, a, r);
    /* ns per alloc and per free, the clock reads taken off. */
    double al = (double)acc[BENCH_OP_ALLOC] - clock_ns * (double)runs[BENCH_OP_ALLOC];
    double fr = (double)acc[BENCH_OP_FREE] - clock_ns * (double)runs[BENCH_OP_FREE];
    r->ns_alloc[rep] = (al > 0 ? al : 0) / (double)(t->n_allocs ? t->n_allocs : 1);
    r->ns_free[rep] = (fr > 0 ? fr : 0) / (double)(t->n_frees ? t->n_frees : 1);
    r->runs_alloc = runs[BENCH_OP_ALLOC];
    r->runs_free = runs[BENCH_OP_FREE];
}
