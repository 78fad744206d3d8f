/* bench_alloc: the caching allocator against a naive first-fit allocator on
 * the same allocation trace, in the same run.
 *
 * The trace (bench/lib/trace.h) is generated (an LLM-like training run) or
 * read from a recorded file. Each allocator replays it:
 *   1. once untimed, checking every block against the live ones (disjoint,
 *      large enough, right stream) and sampling statistics after every
 *      operation for the fragmentation figures;
 *   2. --repeat times timed end to end (ns per op), and as many times with a
 *      clock read at each switch between allocations and frees (the split
 *      into ns per alloc and ns per free).
 * Passes alternate between the allocators; each pass gets a fresh allocator.
 * The caching allocator runs on the sim device without data, so only sizes
 * and virtual time exist. docs/bench.md explains the output. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chameleon/alloc.h"
#include "chameleon/device.h"
#include "lib/firstfit.h"
#include "lib/trace.h"

#define ALIGN 512            /* first-fit rounding = the caching allocator's */

/* Timings of an unoptimised or sanitised build say little; the output says
 * so. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLOW_BUILD "sanitizer build"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(undefined_behavior_sanitizer)
#define SLOW_BUILD "sanitizer build"
#endif
#endif
#if !defined(SLOW_BUILD) && !defined(__OPTIMIZE__)
#define SLOW_BUILD "unoptimised build"
#endif
#define MIN_OPS 1000000u

/* ---- options ---------------------------------------------------------------*/
typedef struct options {
    uint64_t ops;
    uint64_t seed;
    uint64_t capacity;       /* 0 = derived from the trace */
    const char *trace, *save;
    int repeat;
    bool check;
    bool ops_set, seed_set;
} options_t;

static const char usage[] =
    "usage: bench_alloc [options]\n"
    "Replays an allocation trace through Chameleon's caching allocator and a naive\n"
    "first-fit allocator in the same run and prints both side by side.\n"
    "\n"
    "  --ops N          generate whole training steps until at least N operations\n"
    "                   (default 1000000)\n"
    "  --seed N         seed of the generated trace (default 1)\n"
    "  --capacity SIZE  device capacity and first-fit arena, in bytes or with a\n"
    "                   K/M/G/T suffix (binary); default: the trace's peak live\n"
    "                   bytes / 0.8, rounded up to 256 MiB\n"
    "  --trace FILE     replay a recorded trace instead of generating one\n"
    "  --save FILE      write the trace (\"a ID BYTES STREAM\" / \"f ID\") to FILE\n"
    "  --repeat N       timed replays per allocator, median reported (default 5)\n"
    "  --no-check       skip the disjointness check (fragmentation is still sampled)\n"
    "  --help           this text\n"
    "\n"
    "Output and trace model: docs/bench.md.\n";

static void bad_option(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench_alloc: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n(bench_alloc --help lists the options)\n", stderr);
    exit(2);
}

static bool parse_uint(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = (uint64_t)v;
    return true;
}

/* "34359738368", "32G", "32GiB", "512M", "1.5G" is not accepted. */
static bool parse_size(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return false;
    int shift = 0;
    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    case 'T': case 't': shift = 40; end++; break;
    default: break;
    }
    if (shift && strcmp(end, "iB") == 0)
        end += 2;
    else if (strcmp(end, "B") == 0)
        end += 1;
    if (*end || v == 0 || v > (UINT64_MAX >> shift))
        return false;
    *out = (uint64_t)v << shift;
    return true;
}

static void parse_options(int argc, char **argv, options_t *o)
{
    memset(o, 0, sizeof *o);
    o->ops = MIN_OPS;
    o->seed = 1;
    o->repeat = 5;
    o->check = true;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage, stdout);
            exit(0);
        }
        if (strcmp(arg, "--no-check") == 0) {
            o->check = false;
            continue;
        }
        static const char *const with_value[] = {"--ops", "--seed", "--capacity", "--trace",
                                                 "--save", "--repeat"};
        const char *name = NULL, *value = NULL;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++) {
            size_t n = strlen(with_value[k]);
            if (strncmp(arg, with_value[k], n) == 0 && (arg[n] == '\0' || arg[n] == '=')) {
                name = with_value[k];
                if (arg[n] == '=')
                    value = arg + n + 1;
                else if (i + 1 < argc)
                    value = argv[++i];
                else
                    bad_option("%s needs a value", name);
                break;
            }
        }
        if (!name)
            bad_option("unknown option '%s'", arg);
        uint64_t v;
        if (strcmp(name, "--ops") == 0) {
            if (!parse_uint(value, &v) || v == 0)
                bad_option("--ops: expected a positive integer, got '%s'", value);
            o->ops = v;
            o->ops_set = true;
        } else if (strcmp(name, "--seed") == 0) {
            if (!parse_uint(value, &v))
                bad_option("--seed: expected an unsigned integer, got '%s'", value);
            o->seed = v;
            o->seed_set = true;
        } else if (strcmp(name, "--capacity") == 0) {
            if (!parse_size(value, &v) || v < ALIGN)
                bad_option("--capacity: expected a size such as 34359738368, 32G or 32GiB "
                           "(at least %d bytes), got '%s'", ALIGN, value);
            o->capacity = v;
        } else if (strcmp(name, "--repeat") == 0) {
            if (!parse_uint(value, &v) || v == 0 || v > 100)
                bad_option("--repeat: expected an integer from 1 to 100, got '%s'", value);
            o->repeat = (int)v;
        } else if (strcmp(name, "--trace") == 0) {
            if (!*value)
                bad_option("--trace: empty file name");
            o->trace = value;
        } else {
            if (!*value)
                bad_option("--save: empty file name");
            o->save = value;
        }
    }
    if (o->trace && (o->ops_set || o->seed_set))
        bad_option("--ops and --seed shape a generated trace; a --trace file is replayed "
                   "as recorded");
}

/* ---- helpers ----------------------------------------------------------------*/
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Average cost of one clock read, in ns. */
static double clock_cost_ns(void)
{
    enum { N = 200000 };
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        uint64_t t0 = now_ns(), t = t0;
        for (int i = 0; i < N; i++)
            t = now_ns();
        double c = (double)(t - t0) / N;
        if (c < best)
            best = c;
    }
    return best;
}

/* The value of the first "key : value" line of /proc/cpuinfo whose key is
 * exactly key, or "". */
static void cpuinfo_field(const char *key, char *buf, size_t size)
{
    buf[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0 || (line[klen] != ' ' && line[klen] != '\t' &&
                                               line[klen] != ':'))
            continue;
        const char *p = strchr(line, ':');
        if (!p)
            continue;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        snprintf(buf, size, "%.*s", (int)strcspn(p, "\n"), p);
        break;
    }
    fclose(f);
}

/* "AMD EPYC (family 25, model 17)" */
static void cpu_model(char *buf, size_t size)
{
    char name[160], family[16], model[16];
    cpuinfo_field("model name", name, sizeof name);
    cpuinfo_field("cpu family", family, sizeof family);
    cpuinfo_field("model", model, sizeof model);
    if (!name[0])
        snprintf(name, sizeof name, "unknown CPU");
    if (family[0] && model[0])
        snprintf(buf, size, "%s (family %s, model %s)", name, family, model);
    else
        snprintf(buf, size, "%s", name);
}

static double gib(uint64_t b)
{
    return (double)b / (double)(1ull << 30);
}

/* 1234567 -> "1,234,567" */
static const char *grouped(char *buf, size_t size, uint64_t v)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
    size_t j = 0;
    for (int i = 0; i < n && j + 2 < size; i++) {
        buf[j++] = tmp[i];
        int left = n - i - 1;
        if (left > 0 && left % 3 == 0)
            buf[j++] = ',';
    }
    buf[j] = '\0';
    return buf;
}

static double pct(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- the live-block checker ----------------------------------------------------
 * A treap of the live blocks keyed by start address, one node per trace slot.
 * Invariant: the blocks in the tree are pairwise disjoint (checked on every
 * insertion against the predecessor and successor). */
typedef struct checker {
    uint64_t *lo, *hi;       /* [lo, hi) of the block in each slot */
    uint32_t *left, *right, *prio;
    uint32_t root;
    uint64_t rng;
} checker_t;

#define NIL UINT32_MAX

static bool checker_init(checker_t *c, uint32_t n_slots)
{
    memset(c, 0, sizeof *c);
    size_t n = n_slots ? n_slots : 1;
    c->lo = malloc(n * sizeof *c->lo);
    c->hi = malloc(n * sizeof *c->hi);
    c->left = malloc(n * sizeof *c->left);
    c->right = malloc(n * sizeof *c->right);
    c->prio = malloc(n * sizeof *c->prio);
    c->root = NIL;
    c->rng = 0x2545F4914F6CDD1Dull;
    return c->lo && c->hi && c->left && c->right && c->prio;
}

static void checker_release(checker_t *c)
{
    free(c->lo);
    free(c->hi);
    free(c->left);
    free(c->right);
    free(c->prio);
}

static uint32_t treap_insert(checker_t *c, uint32_t t, uint32_t s)
{
    if (t == NIL)
        return s;
    if (c->lo[s] < c->lo[t]) {
        c->left[t] = treap_insert(c, c->left[t], s);
        if (c->prio[c->left[t]] > c->prio[t]) {   /* rotate right */
            uint32_t l = c->left[t];
            c->left[t] = c->right[l];
            c->right[l] = t;
            return l;
        }
    } else {
        c->right[t] = treap_insert(c, c->right[t], s);
        if (c->prio[c->right[t]] > c->prio[t]) {  /* rotate left */
            uint32_t r = c->right[t];
            c->right[t] = c->left[r];
            c->left[r] = t;
            return r;
        }
    }
    return t;
}

static uint32_t treap_merge(checker_t *c, uint32_t a, uint32_t b)
{
    if (a == NIL)
        return b;
    if (b == NIL)
        return a;
    if (c->prio[a] > c->prio[b]) {
        c->right[a] = treap_merge(c, c->right[a], b);
        return a;
    }
    c->left[b] = treap_merge(c, a, c->left[b]);
    return b;
}

static uint32_t treap_erase(checker_t *c, uint32_t t, uint32_t s)
{
    if (t == NIL)
        return NIL;
    if (t == s)
        return treap_merge(c, c->left[t], c->right[t]);
    if (c->lo[s] < c->lo[t])
        c->left[t] = treap_erase(c, c->left[t], s);
    else
        c->right[t] = treap_erase(c, c->right[t], s);
    return t;
}

/* Adds [lo, lo + size) as slot s; returns the slot it overlaps, or NIL. */
static uint32_t checker_add(checker_t *c, uint32_t s, uint64_t lo, uint64_t size)
{
    uint64_t hi = lo + size;
    uint32_t pred = NIL, succ = NIL;
    for (uint32_t t = c->root; t != NIL;) {
        if (c->lo[t] <= lo) {
            pred = t;
            t = c->right[t];
        } else {
            succ = t;
            t = c->left[t];
        }
    }
    if (pred != NIL && c->hi[pred] > lo)
        return pred;
    if (succ != NIL && c->lo[succ] < hi)
        return succ;
    c->lo[s] = lo;
    c->hi[s] = hi;
    c->left[s] = c->right[s] = NIL;
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    c->prio[s] = (uint32_t)c->rng;
    c->root = treap_insert(c, c->root, s);
    return NIL;
}

static void checker_remove(checker_t *c, uint32_t s)
{
    c->root = treap_erase(c, c->root, s);
}

/* ---- results -----------------------------------------------------------------*/
typedef struct result {
    const char *name;
    /* untimed pass */
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
    /* timed passes */
    double ns_op[100], ns_alloc[100], ns_free[100];
    uint64_t runs_alloc, runs_free;
} result_t;

/* Sample after one operation: fragmentation at the first moment allocated
 * reaches its peak, and the maximum over samples where at least 10% of the
 * capacity is free. */
static void sample(result_t *r, const bench_trace_t *t, uint64_t i, uint64_t allocated,
                   uint64_t capacity, double frag)
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
        if (r->step_peak_frag > r->worst_step_frag) {
            r->worst_step_frag = r->step_peak_frag;
            r->worst_step = r->step;
        }
        r->step++;
        r->step_peak = 0;
    }
}

typedef struct bench {
    const bench_trace_t *trace;
    uint64_t capacity;
    cham_device_t *dev;
    cham_stream_t *streams[BENCH_TRACE_MAX_STREAMS];
    uint32_t *leftover;      /* slots the trace leaves live */
    size_t n_leftover;
    cham_block_t **cham_blocks;      /* per slot, live blocks of the replay */
    firstfit_block_t **ff_blocks;
    bool check;
} bench_t;

static void fail_op(const char *who, const bench_t *b, size_t i, const char *msg)
{
    const bench_op_t *op = &b->trace->ops[i];
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

/* ---- caching allocator -------------------------------------------------------*/
static cham_allocator_t *cham_make(const bench_t *b)
{
    cham_allocator_config_t cfg = {.kind = CHAM_MEM_DEVICE, .limit = 0};
    cham_allocator_t *a = NULL;
    cham_status_t st = cham_allocator_new(b->dev, &cfg, &a);
    if (st != CHAM_OK) {
        fprintf(stderr, "bench_alloc: cham_allocator_new: %s: %s\n", cham_status_string(st),
                cham_device_last_error(b->dev));
        exit(1);
    }
    return a;
}

static void cham_fail(const bench_t *b, cham_allocator_t *a, size_t i, cham_status_t st)
{
    const char *why = cham_allocator_last_error(a);
    fail_op("caching allocator", b, i, *why ? why : cham_status_string(st));
}

static void cham_finish(bench_t *b, cham_allocator_t *a, result_t *r, bool timed_pass)
{
    for (size_t k = 0; k < b->n_leftover; k++)
        cham_block_free(a, b->cham_blocks[b->leftover[k]]);
    cham_alloc_stats_t s;
    cham_allocator_get_stats(a, &s);
    if (s.allocated != 0 || s.n_allocs != b->trace->n_allocs ||
        s.n_frees != b->trace->n_allocs) {
        fprintf(stderr, "bench_alloc: caching allocator: statistics disagree with the trace "
                "(allocated %" PRIu64 " after freeing all, %" PRIu64 " allocs and %" PRIu64
                " frees counted, %zu allocs replayed)\n",
                s.allocated, s.n_allocs, s.n_frees, b->trace->n_allocs);
        exit(1);
    }
    if (timed_pass && s.peak_allocated != r->peak_allocated) {
        fprintf(stderr, "bench_alloc: caching allocator: timed replay reached a peak of %" PRIu64
                " bytes, the checked replay %" PRIu64 ": not deterministic\n",
                s.peak_allocated, r->peak_allocated);
        exit(1);
    }
    if (!timed_pass) {
        r->peak_reserved = s.peak_reserved;
        r->segments = s.n_segment_allocs;
        if (s.peak_allocated != r->peak_allocated) {
            fprintf(stderr, "bench_alloc: caching allocator: peak_allocated %" PRIu64
                    " but the sampled peak is %" PRIu64 "\n", s.peak_allocated,
                    r->peak_allocated);
            exit(1);
        }
    }
    cham_allocator_free(a);
}

static void cham_checked(bench_t *b, result_t *r)
{
    const bench_trace_t *t = b->trace;
    cham_allocator_t *a = cham_make(b);
    checker_t c;
    if (b->check && !checker_init(&c, t->n_slots)) {
        fprintf(stderr, "bench_alloc: out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < t->n_ops; i++) {
        const bench_op_t *op = &t->ops[i];
        if (op->kind == BENCH_OP_ALLOC) {
            cham_block_t *blk;
            cham_stream_t *stream = b->streams[op->stream];
            cham_status_t st = cham_block_alloc(a, op->bytes, stream, &blk);
            if (st != CHAM_OK)
                cham_fail(b, a, i, st);
            b->cham_blocks[op->slot] = blk;
            if (b->check) {
                uint64_t lo = (uint64_t)(uintptr_t)cham_block_ptr(blk);
                uint64_t size = cham_block_size(blk);
                if (!lo || size < op->bytes || cham_block_requested(blk) != op->bytes ||
                    cham_block_stream(blk) != stream)
                    fail_check(r->name, i, "block %#" PRIx64 " of %" PRIu64
                               " bytes (requested %zu, stream %p) for a request of %" PRIu64
                               " bytes on stream %p", lo, size, cham_block_requested(blk),
                               (void *)cham_block_stream(blk), op->bytes, (void *)stream);
                uint32_t other = checker_add(&c, op->slot, lo, size);
                if (other != NIL)
                    fail_check(r->name, i, "block [%#" PRIx64 ", %#" PRIx64
                               ") overlaps live block [%#" PRIx64 ", %#" PRIx64 ")",
                               lo, lo + size, c.lo[other], c.hi[other]);
            }
        } else {
            if (b->check)
                checker_remove(&c, op->slot);
            cham_block_free(a, b->cham_blocks[op->slot]);
        }
        cham_alloc_stats_t s;
        cham_allocator_get_stats(a, &s);
        sample(r, t, i, s.allocated, s.limit, s.fragmentation);
    }
    if (b->check)
        checker_release(&c);
    cham_finish(b, a, r, false);
}

static double cham_timed(bench_t *b, result_t *r)
{
    const bench_trace_t *t = b->trace;
    const bench_op_t *ops = t->ops;
    cham_block_t **h = b->cham_blocks;
    cham_stream_t **streams = b->streams;
    cham_allocator_t *a = cham_make(b);
    size_t n = t->n_ops;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        const bench_op_t *op = &ops[i];
        if (op->kind == BENCH_OP_ALLOC) {
            cham_status_t st = cham_block_alloc(a, op->bytes, streams[op->stream], &h[op->slot]);
            if (st != CHAM_OK)
                cham_fail(b, a, i, st);
        } else {
            cham_block_free(a, h[op->slot]);
        }
    }
    uint64_t t1 = now_ns();
    cham_finish(b, a, r, true);
    return (double)(t1 - t0);
}

/* Time per kind: the clock is read whenever the trace switches between
 * allocations and frees; acc[kind] collects the runs of that kind. */
static void cham_split(bench_t *b, result_t *r, uint64_t acc[2], uint64_t runs[2])
{
    const bench_trace_t *t = b->trace;
    const bench_op_t *ops = t->ops;
    cham_block_t **h = b->cham_blocks;
    cham_stream_t **streams = b->streams;
    cham_allocator_t *a = cham_make(b);
    size_t n = t->n_ops;
    acc[0] = acc[1] = runs[0] = runs[1] = 0;
    unsigned kind = ops[0].kind;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        const bench_op_t *op = &ops[i];
        if (op->kind != kind) {
            uint64_t t1 = now_ns();
            acc[kind] += t1 - t0;
            runs[kind]++;
            t0 = t1;
            kind = op->kind;
        }
        if (op->kind == BENCH_OP_ALLOC) {
            cham_status_t st = cham_block_alloc(a, op->bytes, streams[op->stream], &h[op->slot]);
            if (st != CHAM_OK)
                cham_fail(b, a, i, st);
        } else {
            cham_block_free(a, h[op->slot]);
        }
    }
    uint64_t t1 = now_ns();
    acc[kind] += t1 - t0;
    runs[kind]++;
    cham_finish(b, a, r, true);
}

/* ---- first-fit -----------------------------------------------------------------*/
static firstfit_t *ff_make(const bench_t *b)
{
    firstfit_t *ff = firstfit_new(b->capacity, ALIGN);
    if (!ff) {
        fprintf(stderr, "bench_alloc: first-fit: cannot create the arena\n");
        exit(1);
    }
    return ff;
}

static void ff_finish(bench_t *b, firstfit_t *ff, result_t *r, bool timed_pass)
{
    for (size_t k = 0; k < b->n_leftover; k++)
        firstfit_free(ff, b->ff_blocks[b->leftover[k]]);
    firstfit_stats_t s;
    firstfit_get_stats(ff, &s);
    if (s.allocated != 0 || s.free_runs != 1 || s.largest_free != s.capacity ||
        s.n_allocs != b->trace->n_allocs || s.n_frees != b->trace->n_allocs) {
        fprintf(stderr, "bench_alloc: first-fit: the arena is not whole again after freeing "
                "everything (%" PRIu64 " bytes allocated, %" PRIu64 " free runs)\n",
                s.allocated, s.free_runs);
        exit(1);
    }
    if (timed_pass && s.peak_allocated != r->peak_allocated) {
        fprintf(stderr, "bench_alloc: first-fit: timed replay reached a peak of %" PRIu64
                " bytes, the checked replay %" PRIu64 ": not deterministic\n",
                s.peak_allocated, r->peak_allocated);
        exit(1);
    }
    if (!timed_pass)
        r->peak_reserved = s.high_water;
    firstfit_destroy(ff);
}

static void ff_checked(bench_t *b, result_t *r)
{
    const bench_trace_t *t = b->trace;
    firstfit_t *ff = ff_make(b);
    checker_t c;
    if (b->check && !checker_init(&c, t->n_slots)) {
        fprintf(stderr, "bench_alloc: out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < t->n_ops; i++) {
        const bench_op_t *op = &t->ops[i];
        if (op->kind == BENCH_OP_ALLOC) {
            firstfit_block_t *blk = firstfit_alloc(ff, op->bytes);
            if (!blk)
                fail_op("first-fit", b, i, firstfit_last_error(ff));
            b->ff_blocks[op->slot] = blk;
            if (b->check) {
                uint64_t lo = firstfit_block_offset(blk), size = firstfit_block_size(blk);
                if (size < op->bytes || lo + size > b->capacity)
                    fail_check(r->name, i, "block [%" PRIu64 ", %" PRIu64
                               ") for a request of %" PRIu64 " bytes", lo, lo + size,
                               op->bytes);
                uint32_t other = checker_add(&c, op->slot, lo, size);
                if (other != NIL)
                    fail_check(r->name, i, "block [%" PRIu64 ", %" PRIu64
                               ") overlaps live block [%" PRIu64 ", %" PRIu64 ")",
                               lo, lo + size, c.lo[other], c.hi[other]);
            }
        } else {
            if (b->check)
                checker_remove(&c, op->slot);
            firstfit_free(ff, b->ff_blocks[op->slot]);
        }
        firstfit_stats_t s;
        firstfit_get_stats(ff, &s);
        sample(r, t, i, s.allocated, s.capacity, s.fragmentation);
        if (s.free_runs > r->max_free_runs)
            r->max_free_runs = s.free_runs;
    }
    if (b->check)
        checker_release(&c);
    ff_finish(b, ff, r, false);
}

static double ff_timed(bench_t *b, result_t *r)
{
    const bench_trace_t *t = b->trace;
    const bench_op_t *ops = t->ops;
    firstfit_block_t **h = b->ff_blocks;
    firstfit_t *ff = ff_make(b);
    size_t n = t->n_ops;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        const bench_op_t *op = &ops[i];
        if (op->kind == BENCH_OP_ALLOC) {
            h[op->slot] = firstfit_alloc(ff, op->bytes);
            if (!h[op->slot])
                fail_op("first-fit", b, i, firstfit_last_error(ff));
        } else {
            firstfit_free(ff, h[op->slot]);
        }
    }
    uint64_t t1 = now_ns();
    ff_finish(b, ff, r, true);
    return (double)(t1 - t0);
}

static void ff_split(bench_t *b, result_t *r, uint64_t acc[2], uint64_t runs[2])
{
    const bench_trace_t *t = b->trace;
    const bench_op_t *ops = t->ops;
    firstfit_block_t **h = b->ff_blocks;
    firstfit_t *ff = ff_make(b);
    size_t n = t->n_ops;
    acc[0] = acc[1] = runs[0] = runs[1] = 0;
    unsigned kind = ops[0].kind;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        const bench_op_t *op = &ops[i];
        if (op->kind != kind) {
            uint64_t t1 = now_ns();
            acc[kind] += t1 - t0;
            runs[kind]++;
            t0 = t1;
            kind = op->kind;
        }
        if (op->kind == BENCH_OP_ALLOC) {
            h[op->slot] = firstfit_alloc(ff, op->bytes);
            if (!h[op->slot])
                fail_op("first-fit", b, i, firstfit_last_error(ff));
        } else {
            firstfit_free(ff, h[op->slot]);
        }
    }
    uint64_t t1 = now_ns();
    acc[kind] += t1 - t0;
    runs[kind]++;
    ff_finish(b, ff, r, true);
}

/* ns per alloc and per free of one split pass, the clock reads taken off. */
static void split_result(result_t *r, int rep, const bench_trace_t *t, const uint64_t acc[2],
                         const uint64_t runs[2], double clock_ns)
{
    double a = (double)acc[BENCH_OP_ALLOC] - clock_ns * (double)runs[BENCH_OP_ALLOC];
    double f = (double)acc[BENCH_OP_FREE] - clock_ns * (double)runs[BENCH_OP_FREE];
    r->ns_alloc[rep] = (a > 0 ? a : 0) / (double)(t->n_allocs ? t->n_allocs : 1);
    r->ns_free[rep] = (f > 0 ? f : 0) / (double)(t->n_frees ? t->n_frees : 1);
    r->runs_alloc = runs[BENCH_OP_ALLOC];
    r->runs_free = runs[BENCH_OP_FREE];
}

/* ---- main ----------------------------------------------------------------------*/
static void describe_trace(const options_t *o, const bench_trace_config_t *cfg,
                           const bench_trace_t *t)
{
    char a[32], b[32], c[32];
    if (o->trace) {
        printf("trace:    recorded, %s\n", o->trace);
    } else {
        int moe = 0;
        for (int l = 0; l < cfg->layers; l++)
            moe += cfg->moe_every > 0 && l % cfg->moe_every == cfg->moe_every - 1;
        printf("trace:    generated, seed %" PRIu64 ": Llama-style decoder, %d layers (%d MoE: "
               "%d experts, top-%d), hidden %d, %d/%d heads, FFN %d, vocab %d,\n"
               "          batch %d x sequence <= %d, fp16 weights + fp32 AdamW states; "
               "%" PRIu64 " training steps\n",
               cfg->seed, cfg->layers, moe, cfg->experts, cfg->top_k, cfg->hidden, cfg->heads,
               cfg->kv_heads, cfg->ffn, cfg->vocab, cfg->batch, cfg->seq, t->steps);
    }
    double na = (double)(t->n_allocs ? t->n_allocs : 1);
    printf("          %s operations (%s allocs, %s frees), %d stream%s (%.2f%% of allocs on "
           "streams > 0)\n",
           grouped(a, sizeof a, t->n_ops), grouped(b, sizeof b, t->n_allocs),
           grouped(c, sizeof c, t->n_frees), t->n_streams, t->n_streams > 1 ? "s" : "",
           100.0 * (double)t->allocs_stream1 / na);
    printf("          sizes %" PRIu64 " B .. %.2f GiB: %.1f%% <= 1 MiB, %.1f%% < 10 MiB, "
           "%.1f%% >= 10 MiB; peak live %.2f GiB in %s blocks\n",
           t->min_bytes, gib(t->max_bytes), 100.0 * (double)t->allocs_small / na,
           100.0 * (double)t->allocs_mid / na, 100.0 * (double)t->allocs_large / na,
           gib(t->peak_live_bytes), grouped(a, sizeof a, t->peak_live_blocks));
    if (t->live_at_end)
        printf("          %" PRIu64 " blocks live at the end are freed after the timed "
               "region\n", t->live_at_end);
}

int main(int argc, char **argv)
{
    options_t o;
    parse_options(argc, argv, &o);

    bench_trace_t trace;
    bench_trace_config_t cfg;
    bench_trace_config_default(&cfg);
    char err[512];
    if (o.trace) {
        if (!bench_trace_load(o.trace, &trace, err, sizeof err)) {
            fprintf(stderr, "bench_alloc: %s\n", err);
            return 1;
        }
    } else {
        cfg.seed = o.seed;
        cfg.min_ops = o.ops;
        if (!bench_trace_generate(&cfg, &trace, err, sizeof err)) {
            fprintf(stderr, "bench_alloc: %s\n", err);
            return 1;
        }
    }
    if (o.save) {
        char comment[128];
        if (o.trace)
            snprintf(comment, sizeof comment, "copied from %s", o.trace);
        else
            snprintf(comment, sizeof comment,
                     "generated by bench_alloc --seed %" PRIu64 " --ops %" PRIu64, o.seed,
                     o.ops);
        if (!bench_trace_save(o.save, &trace, comment, err, sizeof err)) {
            fprintf(stderr, "bench_alloc: %s\n", err);
            return 1;
        }
    }

    bench_t b;
    memset(&b, 0, sizeof b);
    b.trace = &trace;
    b.check = o.check;
    uint64_t quantum = (uint64_t)256 << 20;
    b.capacity = o.capacity;
    if (!b.capacity) {
        uint64_t want = trace.peak_live_bytes / 4 * 5 + quantum;
        b.capacity = want / quantum * quantum;
    }

    /* Slots left live at the end of the trace, freed after each replay. */
    bool *live = calloc(trace.n_slots ? trace.n_slots : 1, sizeof *live);
    b.leftover = malloc((trace.live_at_end ? trace.live_at_end : 1) * sizeof *b.leftover);
    b.cham_blocks = calloc(trace.n_slots ? trace.n_slots : 1, sizeof *b.cham_blocks);
    b.ff_blocks = calloc(trace.n_slots ? trace.n_slots : 1, sizeof *b.ff_blocks);
    if (!live || !b.leftover || !b.cham_blocks || !b.ff_blocks) {
        fprintf(stderr, "bench_alloc: out of host memory\n");
        return 1;
    }
    for (size_t i = 0; i < trace.n_ops; i++)
        live[trace.ops[i].slot] = trace.ops[i].kind == BENCH_OP_ALLOC;
    for (uint32_t s = 0; s < trace.n_slots; s++)
        if (live[s])
            b.leftover[b.n_leftover++] = s;
    free(live);

    cham_device_config_t dc = cham_device_config_default();
    dc.capacity = b.capacity;
    dc.data = false;
    dc.hazard_check = false;     /* no kernels are launched */
    cham_status_t st = cham_device_open(&dc, &b.dev);
    if (st != CHAM_OK) {
        fprintf(stderr, "bench_alloc: cannot open the sim device: %s: %s\n",
                cham_status_string(st), cham_device_last_error(NULL));
        return 1;
    }
    for (int i = 0; i < trace.n_streams; i++) {
        char name[32];
        if (i < 2)
            snprintf(name, sizeof name, "%s", i == 0 ? "compute" : "comm");
        else
            snprintf(name, sizeof name, "stream%d", i);
        st = cham_stream_new(b.dev, name, &b.streams[i]);
        if (st != CHAM_OK) {
            fprintf(stderr, "bench_alloc: cannot create stream %d: %s: %s\n", i,
                    cham_status_string(st), cham_device_last_error(b.dev));
            return 1;
        }
    }

    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    double clock_ns = clock_cost_ns();

    printf("Chameleon allocator benchmark: caching allocator vs naive first-fit\n");
    printf("machine:  %s, nproc %ld; times are measured wall clock (CLOCK_MONOTONIC), "
           "one clock read costs %.1f ns\n", cpu, nproc, clock_ns);
    describe_trace(&o, &cfg, &trace);
    printf("device:   sim backend without data, capacity %.2f GiB%s; first-fit arena of the "
           "same size, %d-byte rounding\n",
           gib(b.capacity), o.capacity ? "" : " (peak live / 0.8, rounded up to 256 MiB)",
           ALIGN);
    fflush(stdout);

    result_t rc, rf;
    memset(&rc, 0, sizeof rc);
    memset(&rf, 0, sizeof rf);
    rc.name = "caching allocator";
    rf.name = "first-fit";

    cham_checked(&b, &rc);
    ff_checked(&b, &rf);
    if (o.check)
        printf("check:    passed: in an untimed replay of each allocator, every block was "
               "disjoint from all live blocks\n          and at least as large as requested\n");
    else
        printf("check:    skipped (--no-check); the untimed replay only sampled statistics\n");
    fflush(stdout);

    for (int rep = 0; rep < o.repeat; rep++) {
        uint64_t acc[2], runs[2];
        rc.ns_op[rep] = cham_timed(&b, &rc) / (double)trace.n_ops;
        rf.ns_op[rep] = ff_timed(&b, &rf) / (double)trace.n_ops;
        cham_split(&b, &rc, acc, runs);
        split_result(&rc, rep, &trace, acc, runs, clock_ns);
        ff_split(&b, &rf, acc, runs);
        split_result(&rf, rep, &trace, acc, runs, clock_ns);
    }
    double c_op = median(rc.ns_op, o.repeat), f_op = median(rf.ns_op, o.repeat);
    double c_al = median(rc.ns_alloc, o.repeat), f_al = median(rf.ns_alloc, o.repeat);
    double c_fr = median(rc.ns_free, o.repeat), f_fr = median(rf.ns_free, o.repeat);

    char g1[32], g2[32];
    printf("\n%-34s %14s %14s %14s\n", "", "caching", "first-fit", "caching/ff");
    printf("%-34s %14s %14s\n", "operations", grouped(g1, sizeof g1, trace.n_ops),
           grouped(g2, sizeof g2, trace.n_ops));
    printf("%-34s %14.1f %14.1f %14.3f\n", "ns per alloc", c_al, f_al, f_al > 0 ? c_al / f_al : 0);
    printf("%-34s %14.1f %14.1f %14.3f\n", "ns per free", c_fr, f_fr, f_fr > 0 ? c_fr / f_fr : 0);
    printf("%-34s %14.1f %14.1f %14.3f\n", "ns per op", c_op, f_op, f_op > 0 ? c_op / f_op : 0);
    printf("%-34s %14.2f %14.2f\n", "peak allocated (GiB)", gib(rc.peak_allocated),
           gib(rf.peak_allocated));
    printf("%-34s %14.2f %14.2f\n", "peak reserved (GiB)", gib(rc.peak_reserved),
           gib(rf.peak_reserved));
    printf("%-34s %13.2f%% %13.2f%%\n", "fragmentation at peak allocated",
           100 * rc.frag_at_peak, 100 * rf.frag_at_peak);
    if (trace.steps > 0)
        printf("%-34s %13.2f%% %13.2f%%\n", "  worst step, at the step's peak",
               100 * rc.worst_step_frag, 100 * rf.worst_step_frag);
    printf("%-34s %13.2f%% %13.2f%%\n", "max fragmentation (free >= 10%)",
           100 * rc.frag_max, 100 * rf.frag_max);
    if (trace.steps_end > trace.steps_begin)
        printf("%-34s %13.2f%% %13.2f%%\n", "  the same, training steps only",
               100 * rc.frag_max_steps, 100 * rf.frag_max_steps);

    printf("\nnotes:\n"
           "  ns per op: one replay with no clock reads inside, divided by all operations;\n"
           "    median of %d, each replay with a fresh allocator (segment allocation\n"
           "    included).\n"
           "  ns per alloc / per free: another replay reads the clock whenever the trace\n"
           "    switches between allocations and frees (%s runs of allocations, %s of\n"
           "    frees) and takes %.1f ns off per read; medians of %d. They need not add\n"
           "    up exactly to ns per op.\n",
           o.repeat, grouped(g1, sizeof g1, rc.runs_alloc), grouped(g2, sizeof g2, rc.runs_free),
           clock_ns, o.repeat);
    printf("  peak reserved: caching = segments held from the device (%" PRIu64 " segment\n"
           "    allocations); first-fit = highest arena offset ever in use.\n",
           rc.segments);
    printf("  fragmentation = 1 - largest free block / free memory, free memory = capacity -\n"
           "    allocated; for the caching allocator as cham_alloc_stats_t defines it\n"
           "    (alloc.h: the largest block one allocation could get, cached or not yet\n"
           "    reserved). Sampled after every operation of the untimed replay.\n"
           "    'at peak allocated': the sample right after allocated first reached its\n"
           "    peak; 'worst step': each training step's sample at that step's peak, the\n"
           "    largest over the steps. 'max': only samples with at least 10%% of the\n"
           "    capacity free count (%.1f%% of samples for caching, %.1f%% for first-fit),\n"
           "    since with almost nothing free one small hole swings the ratio. Maximum at\n"
           "    operation %" PRIu64 " (caching) and %" PRIu64 " (first-fit); of the counted\n"
           "    samples, %.1f%% (caching) and %.1f%% (first-fit) were above 10%%.\n",
           pct(rc.samples_ok, rc.samples), pct(rf.samples_ok, rf.samples),
           rc.frag_max_op + 1, rf.frag_max_op + 1, pct(rc.samples_over, rc.samples_ok),
           pct(rf.samples_over, rf.samples_ok));
    printf("  first-fit's free list held up to %" PRIu64 " runs (its O(n) scans).\n",
           rf.max_free_runs);
    if (trace.n_ops < MIN_OPS)
        printf("  fewer than %u operations: timings are less stable.\n", MIN_OPS);
#ifdef SLOW_BUILD
    printf("  WARNING: %s; timings are not representative.\n", SLOW_BUILD);
#endif

    bool t_ok = c_op < 100.0;
    printf("\ntargets (issue), caching allocator:\n"
           "  < 100 ns per op:                               %s (%.1f ns)\n"
           "  fragmentation < 10%% at peak allocated:         %s (%.2f%%)\n"
           "  fragmentation < 10%% over the run (max, above): %s (%.2f%%; first-fit %.2f%%)\n",
           t_ok ? "met" : "NOT met", c_op, rc.frag_at_peak < 0.10 ? "met" : "NOT met",
           100 * rc.frag_at_peak, rc.frag_max < 0.10 ? "met" : "NOT met", 100 * rc.frag_max,
           100 * rf.frag_max);

    for (int i = 0; i < trace.n_streams; i++)
        cham_stream_free(b.streams[i]);
    cham_device_close(b.dev);
    free(b.leftover);
    free(b.cham_blocks);
    free(b.ff_blocks);
    bench_trace_release(&trace);
    return 0;
}
