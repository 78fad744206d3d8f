/* The perturbation harness (issue 14, docs/testing.md): seeded random
 * training-like programs with random op insertions, deletions and
 * reorderings between steps, through the runtime in data mode with the
 * hazard detector on, each compared op by op with an unconstrained run.
 *
 * Without arguments (CTest): a reduced count of seeds, then the negative
 * control (a corrupted swap-in must be caught). With arguments it runs the
 * seeds asked for and prints one line to reproduce each failure:
 *
 *   test_perturb --seed 1234 [--mode chameleon|pytorch|both] [-v]
 *   test_perturb --first 1 --count 1000 --jobs 2       (make soak)
 *
 * Each seed runs in a child process, so an assertion, a crash or a
 * sanitizer report fails that seed and names it, and the others go on. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/perturb.h"

/* Seeds in `make test` (docs/testing.md has the times): 100, and 50 under
 * a sanitizer (CHAM_SANITIZED, tests/CMakeLists.txt), where a seed costs
 * about twice as much. test_seeds asserts the same of the 50 (every run
 * clean, policies made and kept, swaps of every kind, both modes); the
 * plain build runs all 100, and `make soak` a thousand. */
#ifdef CHAM_SANITIZED
#define CTEST_SEEDS 50
#else
#define CTEST_SEEDS 100
#endif
#define MAX_JOBS 16
#define MAX_LISTED 64

typedef struct batch {
    uint64_t first, count;
    pt_mode_t mode;
    bool both;                   /* each seed in both executor modes */
    int jobs;
    bool fork;
    bool verbose, list;
    double fraction;
    const char *argv0;
} batch_t;

typedef struct summary {
    uint64_t runs, by_verdict[PT_VERDICT_COUNT_], by_mode[2];
    uint64_t ops, swaps_out, planned, passive, on_demand, policies, cache_hits;
    uint64_t drops, recomputes, runs_recomputed;
    uint64_t steps, steps_stable, runs_stable, runs_swapped, runs_planned, corrupted;
    double seconds, slowest;
    uint64_t slowest_seed;
    uint64_t failed_seed[MAX_LISTED];
    pt_mode_t failed_mode[MAX_LISTED];
    int n_failed;
} summary_t;

static const char *mode_name(pt_mode_t m)
{
    return m == PT_MODE_PYTORCH ? "pytorch" : m == PT_MODE_CHAMELEON ? "chameleon" : "seed";
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- one seed in a child --------------------------------------------------------*/

typedef struct job {
    pid_t pid;
    int fd;
    pt_options_t o;
} job_t;

static void child_main(const pt_options_t *o, int fd)
{
    /* cmocka's handlers would turn a crash into a test failure inside the
     * child and carry on; a crash must end the child. */
    int sigs[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], SIG_DFL);
    /* A seed takes under a second (ten under the sanitizers): one that
     * runs for minutes is stuck, and ends as a failure naming it (signal
     * SIGALRM) instead of holding the whole run up. */
    signal(SIGALRM, SIG_DFL);
    alarm(120);
    pt_result_t r;
    pt_run_seed(o, &r);
    const char *p = (const char *)&r;
    size_t left = sizeof r;
    while (left) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(3);
        p += n, left -= (size_t)n;
    }
    close(fd);
    exit(0);                     /* exit, not _exit: LeakSanitizer runs at exit */
}

static bool start(job_t *j, const pt_options_t *o)
{
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return false;
    }
    if (pid == 0) {
        close(fds[0]);
        child_main(o, fds[1]);
    }
    close(fds[1]);
    j->pid = pid;
    j->fd = fds[0];
    j->o = *o;
    return true;
}

/* Reads the child's result; a child that died gets a crash verdict. */
static void finish(job_t *j, int status, pt_result_t *r)
{
    size_t got = 0;
    char *p = (char *)r;
    while (got < sizeof *r) {
        ssize_t n = read(j->fd, p + got, sizeof *r - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(j->fd);
    bool exited_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (got == sizeof *r && exited_ok)
        return;
    pt_verdict_t v = got == sizeof *r && pt_verdict_ok(r->verdict) ? PT_FAIL_CRASH : r->verdict;
    if (got != sizeof *r) {
        memset(r, 0, sizeof *r);
        r->mode = j->o.mode;
        v = PT_FAIL_CRASH;
    }
    r->verdict = v;
    if (WIFSIGNALED(status))
        snprintf(r->detail, sizeof r->detail, "the run died of signal %d (%s); its messages are "
                 "above", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else if (!exited_ok)
        snprintf(r->detail, sizeof r->detail, "the run exited with status %d (a sanitizer "
                 "report?); its messages are above", WEXITSTATUS(status));
}

/* ---- a batch of seeds ------------------------------------------------------------*/

static void account(summary_t *s, const batch_t *b, const pt_options_t *o, const pt_result_t *r)
{
    s->runs++;
    s->by_verdict[r->verdict]++;
    s->by_mode[r->mode == PT_MODE_PYTORCH]++;
    s->ops += r->ops;
    s->swaps_out += r->swaps_out;
    s->planned += r->planned_swaps_out;
    s->passive += r->passive_swaps_out;
    s->on_demand += r->on_demand_swaps_in;
    s->drops += r->drops;
    s->recomputes += r->recomputes;
    s->runs_recomputed += r->recomputes > 0;
    s->policies += r->policies_generated;
    s->cache_hits += r->policy_cache_hits;
    s->steps += (uint64_t)r->steps_run;
    s->steps_stable += (uint64_t)r->steps_stable;
    s->runs_stable += r->steps_stable > 0;
    s->runs_swapped += r->swaps_out > 0;
    s->runs_planned += r->planned_swaps_out > 0;
    s->corrupted += r->corrupted;
    s->seconds += r->seconds;
    if (r->seconds > s->slowest)
        s->slowest = r->seconds, s->slowest_seed = o->seed;
    if (b->list || b->verbose || !pt_verdict_ok(r->verdict))
        printf("%s seed %llu %s: %s; steps %d/%d (%d Stable), budget %.0f%% of the peak %llu = "
               "%llu bytes, largest op %llu (%.0f%%, %s); swaps %llu out (%llu planned, %llu passive), %llu "
               "on demand; %llu policies; %.2f s\n",
               pt_verdict_ok(r->verdict) ? "ok  " : "FAIL", (unsigned long long)o->seed,
               mode_name(r->mode), pt_verdict_name(r->verdict), r->steps_run, r->steps,
               r->steps_stable, 100 * r->fraction, (unsigned long long)r->peak,
               (unsigned long long)r->budget, (unsigned long long)r->bound,
               r->peak ? 100.0 * (double)r->bound / (double)r->peak : 0.0, r->bound_op,
               (unsigned long long)r->swaps_out, (unsigned long long)r->planned_swaps_out,
               (unsigned long long)r->passive_swaps_out,
               (unsigned long long)r->on_demand_swaps_in,
               (unsigned long long)r->policies_generated, r->seconds);
    if (r->detail[0] && (b->list || b->verbose || !pt_verdict_ok(r->verdict)))
        printf("     %s\n", r->detail);
    if (r->program[0] && (b->verbose || !pt_verdict_ok(r->verdict)))
        printf("     program: %s\n", r->program);
    if (!pt_verdict_ok(r->verdict)) {
        printf("     reproduce: %s --seed %llu --mode %s\n", b->argv0,
               (unsigned long long)o->seed, mode_name(r->mode));
        if (s->n_failed < MAX_LISTED) {
            s->failed_seed[s->n_failed] = o->seed;
            s->failed_mode[s->n_failed++] = r->mode;
        }
    }
    fflush(stdout);
}

static void run_batch(const batch_t *b, summary_t *s)
{
    memset(s, 0, sizeof *s);
    double t0 = now_s();
    int per_seed = b->both ? 2 : 1;
    uint64_t total = b->count * (uint64_t)per_seed, next = 0;
    job_t jobs[MAX_JOBS];
    int running = 0, n_jobs = b->jobs < 1 ? 1 : b->jobs > MAX_JOBS ? MAX_JOBS : b->jobs;
    while (next < total || running) {
        while (next < total && running < n_jobs) {
            pt_options_t o = {.seed = b->first + next / (uint64_t)per_seed,
                              .mode = b->both ? (pt_mode_t)(next % 2) : b->mode,
                              .fraction = b->fraction, .verbose = b->verbose};
            next++;
            if (!b->fork) {
                pt_result_t r;
                pt_run_seed(&o, &r);
                account(s, b, &o, &r);
                continue;
            }
            if (!start(&jobs[running], &o)) {
                fprintf(stderr, "fork: %s\n", strerror(errno));
                exit(2);
            }
            running++;
        }
        if (!running)
            break;
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "waitpid: %s\n", strerror(errno));
            exit(2);
        }
        for (int i = 0; i < running; i++) {
            if (jobs[i].pid != pid)
                continue;
            pt_result_t r;
            finish(&jobs[i], status, &r);
            account(s, b, &jobs[i].o, &r);
            jobs[i] = jobs[--running];
            break;
        }
    }
    s->seconds = now_s() - t0;
}

static uint64_t failures(const summary_t *s)
{
    uint64_t ok = 0;
    for (int v = 0; v < PT_VERDICT_COUNT_; v++)
        if (pt_verdict_ok((pt_verdict_t)v))
            ok += s->by_verdict[v];
    return s->runs - ok;
}

static void print_summary(const summary_t *s, const batch_t *b)
{
    printf("perturbation harness: %llu runs (seeds %llu-%llu; %llu chameleon, %llu pytorch "
           "mode) in %.1f s wall clock, %d job%s; slowest seed %llu: %.2f s\n",
           (unsigned long long)s->runs, (unsigned long long)b->first,
           (unsigned long long)(b->first + b->count - 1), (unsigned long long)s->by_mode[0],
           (unsigned long long)s->by_mode[1], s->seconds, b->jobs, b->jobs == 1 ? "" : "s",
           (unsigned long long)s->slowest_seed, s->slowest);
    printf("  verdicts:");
    for (int v = 0; v < PT_VERDICT_COUNT_; v++)
        if (s->by_verdict[v])
            printf(" %llu %s;", (unsigned long long)s->by_verdict[v],
                   pt_verdict_name((pt_verdict_t)v));
    printf("\n  coverage: %llu steps (%llu in Stable; %llu runs reached Stable), %llu ops, %llu "
           "swap-outs (%llu planned in %llu runs, %llu passive), %llu on-demand swap-ins, %llu "
           "policies generated, %llu cache hits; %llu runs swapped; %llu drops and %llu re-runs "
           "in %llu runs\n",
           (unsigned long long)s->steps, (unsigned long long)s->steps_stable,
           (unsigned long long)s->runs_stable, (unsigned long long)s->ops,
           (unsigned long long)s->swaps_out, (unsigned long long)s->planned,
           (unsigned long long)s->runs_planned, (unsigned long long)s->passive,
           (unsigned long long)s->on_demand, (unsigned long long)s->policies,
           (unsigned long long)s->cache_hits, (unsigned long long)s->runs_swapped,
           (unsigned long long)s->drops, (unsigned long long)s->recomputes,
           (unsigned long long)s->runs_recomputed);
    if (failures(s)) {
        printf("  FAILED: %llu of %llu runs:", (unsigned long long)failures(s),
               (unsigned long long)s->runs);
        for (int i = 0; i < s->n_failed; i++)
            printf(" %llu/%s", (unsigned long long)s->failed_seed[i],
                   mode_name(s->failed_mode[i]));
        printf("\n");
    } else {
        printf("  all clean: bit-exact, no hazard, every out-of-memory stop below twice the "
               "working set or by free bytes the running op's own operands split\n");
    }
    fflush(stdout);
}

/* ---- CTest ------------------------------------------------------------------------*/

static const char *g_argv0 = "test_perturb";

static int env_int(const char *name, int fallback)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

/* The reduced count: every run clean, and the runs did what the harness is
 * for (policies made and applied, swaps of every kind, both modes). */
static void test_seeds(void **state)
{
    (void)state;
    batch_t b = {.first = 1, .count = (uint64_t)env_int("PERTURB_SEEDS", CTEST_SEEDS),
                 .mode = PT_MODE_SEED, .jobs = env_int("PERTURB_JOBS", 1), .fork = true,
                 .argv0 = g_argv0};
    summary_t s;
    run_batch(&b, &s);
    print_summary(&s, &b);
    assert_int_equal(failures(&s), 0);
    assert_true(s.by_mode[0] > 0 && s.by_mode[1] > 0);
    assert_true(s.by_verdict[PT_CLEAN] > s.runs / 2);
    assert_true(s.runs_stable > 0);
    assert_true(s.runs_planned > 0);
    assert_true(s.passive > 0);
    assert_true(s.on_demand > 0);
}

/* The negative control: one byte of a parameter's host copy changed on
 * its way back must turn the verdict to a mismatch; the same seed without
 * it is clean. */
static void test_corruption_is_caught(void **state)
{
    (void)state;
    batch_t b = {.argv0 = g_argv0};
    int tried = 0;
    for (uint64_t seed = 1; seed < 60; seed++) {
        job_t j;
        pt_options_t o = {.seed = seed, .mode = PT_MODE_SEED, .fraction = 0.3,
                          .corrupt_param_swap_in = true};
        assert_true(start(&j, &o));
        int status;
        assert_int_equal(waitpid(j.pid, &status, 0), j.pid);
        pt_result_t r;
        finish(&j, status, &r);
        if (!r.corrupted)
            continue;            /* no parameter came back from the host */
        tried++;
        if (r.verdict != PT_FAIL_MISMATCH)
            fail_msg("seed %llu: a corrupted swap-in of a parameter gave the verdict \"%s\" "
                     "(%s)", (unsigned long long)seed, pt_verdict_name(r.verdict), r.detail);
        printf("negative control, seed %llu: %s\n", (unsigned long long)seed, r.detail);
        o.corrupt_param_swap_in = false;
        summary_t s = {0};
        assert_true(start(&j, &o));
        assert_int_equal(waitpid(j.pid, &status, 0), j.pid);
        finish(&j, status, &r);
        account(&s, &b, &o, &r);
        assert_true(pt_verdict_ok(r.verdict));
        if (tried == 3)
            break;
    }
    assert_true(tried > 0);
}

/* ---- the command line --------------------------------------------------------------*/

static void usage(FILE *f)
{
    fprintf(f, "usage: test_perturb                 the reduced count and the negative control "
               "(CTest)\n"
               "       test_perturb [--seed N | --first N --count C] [--mode chameleon|pytorch|"
               "both|seed]\n"
               "                    [--jobs J] [--fraction F] [--list] [-v] [--no-fork]\n");
}

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end)
        return false;
    *out = v;
    return true;
}

int main(int argc, char **argv)
{
    g_argv0 = argv[0];
    if (argc == 1) {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_seeds),
            cmocka_unit_test(test_corruption_is_caught),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
    }
    batch_t b = {.first = 1, .count = 1, .mode = PT_MODE_SEED, .jobs = 1, .fork = true,
                 .argv0 = argv[0]};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n;
        if (!strcmp(a, "--seed") && v && parse_u64(v, &n)) {
            b.first = n, b.count = 1, i++;
        } else if (!strcmp(a, "--first") && v && parse_u64(v, &n)) {
            b.first = n, i++;
        } else if (!strcmp(a, "--count") && v && parse_u64(v, &n)) {
            b.count = n, i++;
        } else if (!strcmp(a, "--jobs") && v && parse_u64(v, &n) && n >= 1 && n <= MAX_JOBS) {
            b.jobs = (int)n, i++;
        } else if (!strcmp(a, "--fraction") && v && atof(v) > 0 && atof(v) <= 1) {
            b.fraction = atof(v), i++;
        } else if (!strcmp(a, "--mode") && v) {
            i++;
            if (!strcmp(v, "chameleon"))
                b.mode = PT_MODE_CHAMELEON;
            else if (!strcmp(v, "pytorch"))
                b.mode = PT_MODE_PYTORCH;
            else if (!strcmp(v, "both"))
                b.both = true;
            else if (strcmp(v, "seed") != 0)
                return usage(stderr), 2;
        } else if (!strcmp(a, "--list")) {
            b.list = true;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            b.verbose = true;
        } else if (!strcmp(a, "--no-fork")) {
            b.fork = false;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    summary_t s;
    run_batch(&b, &s);
    print_summary(&s, &b);
    return failures(&s) ? 1 : 0;
}
