/* bench_alloc: the caching allocator against a naive first-fit allocator on
 * the same allocation trace, in the same run: options, the run, the report.
 *
 * The trace (bench/lib/trace.h) is generated (an LLM-like training run) or
 * read from a recorded file (bench/lib/trace_io.h). Each allocator replays
 * it (bench/lib/replay.h):
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
#include <unistd.h>

#include "lib/machine.h"
#include "lib/replay.h"
#include "lib/trace.h"
#include "lib/trace_io.h"

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
    bool expandable;
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
    "  --expandable     the caching allocator in expandable-segments mode\n"
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

/* The unsigned decimal number s starts with; *end points past it. */
static bool parse_digits(const char *s, unsigned long long *v, char **end)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    errno = 0;
    *v = strtoull(s, end, 10);
    return errno == 0;
}

static bool parse_uint(const char *s, uint64_t *out)
{
    unsigned long long v;
    char *end;
    if (!parse_digits(s, &v, &end) || *end)
        return false;
    *out = (uint64_t)v;
    return true;
}

/* "34359738368", "32G", "32GiB", "512M", "1.5G" is not accepted. */
static bool parse_size(const char *s, uint64_t *out)
{
    unsigned long long v;
    char *end;
    if (!parse_digits(s, &v, &end))
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
        if (strcmp(arg, "--expandable") == 0) {
            o->expandable = true;
            continue;
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
            if (!parse_size(value, &v) || v < REPLAY_ALIGN)
                bad_option("--capacity: expected a size such as 34359738368, 32G or 32GiB "
                           "(at least %d bytes), got '%s'", REPLAY_ALIGN, value);
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

/* ---- report -----------------------------------------------------------------*/
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


/* ---- main ----------------------------------------------------------------------*/
/* The trace: recorded or generated, and written to --save. */
static void make_trace(const options_t *o, bench_trace_config_t *cfg, bench_trace_t *trace)
{
    char err[512];
    bool ok;
    bench_trace_config_default(cfg);
    if (o->trace) {
        ok = bench_trace_load(o->trace, trace, err, sizeof err);
    } else {
        cfg->seed = o->seed;
        cfg->min_ops = o->ops;
        ok = bench_trace_generate(cfg, trace, err, sizeof err);
    }
    if (ok && o->save) {
        char comment[128];
        if (o->trace)
            snprintf(comment, sizeof comment, "copied from %s", o->trace);
        else
            snprintf(comment, sizeof comment,
                     "generated by bench_alloc --seed %" PRIu64 " --ops %" PRIu64, o->seed,
                     o->ops);
        ok = bench_trace_save(o->save, trace, comment, err, sizeof err);
    }
    if (!ok) {
        fprintf(stderr, "bench_alloc: %s\n", err);
        exit(1);
    }
}

/* --capacity, or the trace's peak live bytes / 0.8, rounded up to 256 MiB. */
static uint64_t device_capacity(const options_t *o, const bench_trace_t *t)
{
    if (o->capacity)
        return o->capacity;
    uint64_t quantum = (uint64_t)256 << 20;
    uint64_t want = t->peak_live_bytes / 4 * 5 + quantum;
    return want / quantum * quantum;
}

/* Medians of one allocator's timed replays, in ns. */
typedef struct times {
    double op, alloc, free;
} times_t;

static times_t medians(replay_result_t *r, int n)
{
    return (times_t){median(r->ns_op, n), median(r->ns_alloc, n), median(r->ns_free, n)};
}

static void row_times(const char *name, double c, double f)
{
    printf("%-34s %14.1f %14.1f %14.3f\n", name, c, f, f > 0 ? c / f : 0);
}

static void row_gib(const char *name, uint64_t c, uint64_t f)
{
    printf("%-34s %14.2f %14.2f\n", name, gib(c), gib(f));
}

static void row_pct(const char *name, double c, double f)
{
    printf("%-34s %13.2f%% %13.2f%%\n", name, 100 * c, 100 * f);
}

static void print_table(const bench_trace_t *t, const replay_result_t *rc,
                        const replay_result_t *rf, times_t c, times_t f)
{
    char g1[32], g2[32];
    printf("\n%-34s %14s %14s %14s\n", "", "caching", "first-fit", "caching/ff");
    printf("%-34s %14s %14s\n", "operations", grouped(g1, sizeof g1, t->n_ops),
           grouped(g2, sizeof g2, t->n_ops));
    row_times("ns per alloc", c.alloc, f.alloc);
    row_times("ns per free", c.free, f.free);
    row_times("ns per op", c.op, f.op);
    row_gib("peak allocated (GiB)", rc->peak_allocated, rf->peak_allocated);
    row_gib("peak reserved (GiB)", rc->peak_reserved, rf->peak_reserved);
    row_pct("fragmentation at peak allocated", rc->frag_at_peak, rf->frag_at_peak);
    if (t->steps > 0)
        row_pct("  worst step, at the step's peak", rc->worst_step_frag, rf->worst_step_frag);
    row_pct("max fragmentation (free >= 10%)", rc->frag_max, rf->frag_max);
    if (t->steps_end > t->steps_begin)
        row_pct("  the same, training steps only", rc->frag_max_steps, rf->frag_max_steps);
}

static void print_notes(int repeat, const bench_trace_t *t, const replay_result_t *rc,
                        const replay_result_t *rf, double clock_ns)
{
    char g1[32], g2[32];
    printf("\nnotes:\n"
           "  ns per op: one replay with no clock reads inside, divided by all operations;\n"
           "    median of %d, each replay with a fresh allocator (segment allocation\n"
           "    included).\n"
           "  ns per alloc / per free: another replay reads the clock whenever the trace\n"
           "    switches between allocations and frees (%s runs of allocations, %s of\n"
           "    frees) and takes %.1f ns off per read; medians of %d. They need not add\n"
           "    up exactly to ns per op.\n",
           repeat, grouped(g1, sizeof g1, rc->runs_alloc), grouped(g2, sizeof g2, rc->runs_free),
           clock_ns, repeat);
    printf("  peak reserved: caching = segments held from the device (%" PRIu64 " segment\n"
           "    allocations); first-fit = highest arena offset ever in use.\n",
           rc->segments);
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
           pct(rc->samples_ok, rc->samples), pct(rf->samples_ok, rf->samples),
           rc->frag_max_op + 1, rf->frag_max_op + 1, pct(rc->samples_over, rc->samples_ok),
           pct(rf->samples_over, rf->samples_ok));
    printf("  first-fit's free list held up to %" PRIu64 " runs (its O(n) scans).\n",
           rf->max_free_runs);
    if (rc->vm_maps)
        printf("  expandable segments: %" PRIu64 " page maps and %" PRIu64 " unmaps in %"
               PRIu64 " stream waits to take pages from free blocks; %" PRIu64 " of the "
               "calls by the end of the first training step (the segments growing to the "
               "peak, once), at most %" PRIu64 " in any later step. Peak reserved counts the "
               "chunks held, mapped or spare.\n",
               rc->vm_maps, rc->vm_unmaps, rc->vm_reclaims, rc->vm_calls_setup,
               rc->vm_calls_max_step);
    if (t->n_ops < MIN_OPS)
        printf("  fewer than %u operations: timings are less stable.\n", MIN_OPS);
#ifdef SLOW_BUILD
    printf("  WARNING: %s; timings are not representative.\n", SLOW_BUILD);
#endif
}

static void print_targets(const bench_trace_t *t, const replay_result_t *rc,
                          const replay_result_t *rf, double c_op)
{
    printf("\ntargets (issue), caching allocator:\n"
           "  < 100 ns per op:                               %s (%.1f ns)\n"
           "  fragmentation < 10%% at peak allocated:         %s (%.2f%%)\n"
           "  fragmentation < 10%% over the run (max, above): %s (%.2f%%; first-fit %.2f%%)\n",
           bench_verdict(c_op < 100.0), c_op, bench_verdict(rc->frag_at_peak < 0.10),
           100 * rc->frag_at_peak, bench_verdict(rc->frag_max < 0.10), 100 * rc->frag_max,
           100 * rf->frag_max);
    if (!rc->vm_maps)
        return;
    /* Map and unmap calls cost the host driver time the replay does not
     * spend: charged at the sim's assumed 5 us each (docs/device.md). The
     * growth to the peak is paid once, so what a long run pays per op is
     * the steady state: the worst later step's calls over a step's ops. */
    double step_ops = t->steps ? (double)(t->steps_end - t->steps_begin) / (double)t->steps : 1;
    double steady_ns = (double)rc->vm_calls_max_step * 5000.0 / step_ops;
    double run_ns = (double)(rc->vm_maps + rc->vm_unmaps) * 5000.0 / (double)t->n_ops;
    printf("targets (issue 16), expandable segments:\n"
           "  fragmentation <= 2%% at every step's peak:      %s (%.2f%%)\n"
           "  <= 100 ns per op with map calls at 5 us each:  %s (%.1f ns + %.1f ns in the "
           "worst step after the first; this run's %" PRIu64 " ops with the growth: + %.1f ns)\n",
           bench_verdict(rc->worst_step_frag <= 0.02), 100 * rc->worst_step_frag,
           bench_verdict(c_op + steady_ns <= 100.0), c_op, steady_ns, (uint64_t)t->n_ops,
           run_ns);
}

int main(int argc, char **argv)
{
    bench_output_by_line();
    options_t o;
    parse_options(argc, argv, &o);
    bench_trace_config_t cfg;
    bench_trace_t trace;
    make_trace(&o, &cfg, &trace);
    replay_env_t env;
    replay_env_open(&env, &trace, device_capacity(&o, &trace), o.expandable, o.check);

    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    double clock_ns = bench_clock_cost_ns();
    printf("Chameleon allocator benchmark: caching allocator vs naive first-fit\n");
    printf("machine:  %s, nproc %ld; times are measured wall clock (CLOCK_MONOTONIC), "
           "one clock read costs %.1f ns\n", cpu, nproc, clock_ns);
    describe_trace(&o, &cfg, &trace);
    printf("device:   sim backend without data, capacity %.2f GiB%s; first-fit arena of the "
           "same size, %d-byte rounding\n",
           gib(env.capacity), o.capacity ? "" : " (peak live / 0.8, rounded up to 256 MiB)",
           REPLAY_ALIGN);
    printf("caching:  %s\n", o.expandable ? "expandable segments (--expandable): one address "
           "reservation per stream and pool, pages (20 MiB, at most 1/4096 of the limit) "
           "mapped under blocks in use"
           : "classic segments (PyTorch's rules); --expandable for expandable segments");
    fflush(stdout);

    /* The passes alternate between the allocators, in this order. */
    const replay_allocator_t *const allocs[2] = {&replay_caching, &replay_firstfit};
    replay_result_t res[2];
    memset(res, 0, sizeof res);
    for (int k = 0; k < 2; k++)
        replay_checked(&env, allocs[k], &res[k]);
    if (o.check)
        printf("check:    passed: in an untimed replay of each allocator, every block was "
               "disjoint from all live blocks\n          and at least as large as requested\n");
    else
        printf("check:    skipped (--no-check); the untimed replay only sampled statistics\n");
    fflush(stdout);
    for (int rep = 0; rep < o.repeat; rep++) {
        for (int k = 0; k < 2; k++)
            res[k].ns_op[rep] = replay_timed(&env, allocs[k], &res[k]) / (double)trace.n_ops;
        for (int k = 0; k < 2; k++)
            replay_split(&env, allocs[k], &res[k], rep, clock_ns);
    }

    times_t c = medians(&res[0], o.repeat), f = medians(&res[1], o.repeat);
    print_table(&trace, &res[0], &res[1], c, f);
    print_notes(o.repeat, &trace, &res[0], &res[1], clock_ns);
    print_targets(&trace, &res[0], &res[1], c.op);

    replay_env_close(&env);
    bench_trace_release(&trace);
    return 0;
}
