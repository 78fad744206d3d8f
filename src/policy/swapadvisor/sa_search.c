/* SwapAdvisor's search (paper §5.1): a population of N_p chromosomes;
 * each generation crosses random pairs (two schedules and two pools make
 * four children), mutates the children, scores them by simulation in
 * parallel threads, and keeps N_p of parents and children with the
 * paper's softmax selection over normalised times, the best always
 * among them. Every random choice is made on the calling thread from one
 * seeded generator and every score is a pure function of its chromosome,
 * so a search is deterministic unless the time limit ends it.
 * docs/swapadvisor.md, "The search". */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/message.h"
#include "policy/plan-impl.h"
#include "policy/swapadvisor/swapadvisor-impl.h"

#define MAX_THREADS 16

cham_swapadvisor_options_t cham_swapadvisor_options_default(void)
{
    return (cham_swapadvisor_options_t){.seed = 1, .population = 24, .generations = 100,
                                        .search_seconds = 10, .threads = 0, .mutation = 0.1,
                                        .schedule_mutation = 0.002,
                                        .reorder = true};
}

void cham_swapadvisor_result_free(cham_swapadvisor_result_t *r)
{
    if (!r)
        return;
    free(r->schedule);
    r->schedule = NULL;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- parallel evaluation --------------------------------------------------*/

typedef struct batch {
    const sa_graph_t *g;
    sa_chrom_t *c;               /* to score */
    size_t n;
    sa_work_t *work[MAX_THREADS];
    unsigned n_threads;
} batch_t;

typedef struct worker {
    batch_t *b;
    unsigned id;
} worker_t;

static void *score_share(void *arg)
{
    const worker_t *wk = arg;
    batch_t *b = wk->b;
    for (size_t i = wk->id; i < b->n; i += b->n_threads) {
        sa_eval_result_t r;
        sa_eval(b->g, &b->c[i], b->work[wk->id], &r, NULL, NULL, NULL, NULL);
        b->c[i].time_ns = r.time_ns;
    }
    return NULL;
}

/* Scores c[0..n): thread i takes i, i + T, ...; the calling thread is
 * thread 0. A thread that cannot start leaves its share to the caller. */
static void score(batch_t *b, sa_chrom_t *c, size_t n)
{
    b->c = c;
    b->n = n;
    pthread_t tid[MAX_THREADS];
    worker_t wk[MAX_THREADS] = {{.b = b, .id = 0}};
    bool started[MAX_THREADS] = {false};
    for (unsigned i = 1; i < b->n_threads; i++)
        wk[i] = (worker_t){.b = b, .id = i};
    for (unsigned i = 1; i < b->n_threads; i++)
        started[i] = pthread_create(&tid[i], NULL, score_share, &wk[i]) == 0;
    score_share(&wk[0]);
    for (unsigned i = 1; i < b->n_threads; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            score_share(&wk[i]);
    }
}

/* ---- selection -------------------------------------------------------------*/

static void swap_chrom(sa_chrom_t *a, sa_chrom_t *b)
{
    sa_chrom_t t = *a;
    *a = *b;
    *b = t;
}

/* Moves the survivors of all[0..n) into all[0..keep): the fastest, then
 * keep - 1 drawn without replacement with probability softmax((t_best -
 * t) / t_best) (paper Eq. 1). Infeasible ones are drawn last. */
static void select_survivors(sa_chrom_t *all, size_t n, size_t keep, double t_best,
                             sa_rng_t *rng, double *weight)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (all[i].time_ns < all[best].time_ns)
            best = i;
    swap_chrom(&all[0], &all[best]);
    for (size_t i = 1; i < n; i++)
        weight[i] = isfinite(all[i].time_ns) && t_best > 0
                        ? exp((t_best - all[i].time_ns) / t_best) : 0;
    for (size_t k = 1; k < keep && k < n; k++) {
        double sum = 0;
        for (size_t i = k; i < n; i++)
            sum += weight[i];
        size_t pick = k;
        if (sum > 0) {
            double x = sa_rand_unit(rng) * sum;
            for (pick = k; pick + 1 < n && x >= weight[pick]; pick++)
                x -= weight[pick];
        }
        swap_chrom(&all[k], &all[pick]);
        double w = weight[k];
        weight[k] = weight[pick];
        weight[pick] = w;
    }
}

/* ---- the search ------------------------------------------------------------*/

typedef struct search {
    const sa_graph_t *g;
    sa_genes_t genes;
    batch_t batch;
    sa_chrom_t *all;             /* population, then the children */
    size_t n_pop, n_kids;
    sa_chrom_t best;
    double *weight;
} search_t;

static void search_free(search_t *s)
{
    for (size_t i = 0; s->all && i < s->n_pop + s->n_kids; i++)
        sa_chrom_free(&s->all[i]);
    free(s->all);
    free(s->weight);
    sa_chrom_free(&s->best);
    for (unsigned i = 0; i < s->batch.n_threads; i++)
        sa_work_free(s->batch.work[i]);
    sa_genes_free(&s->genes);
}

static unsigned thread_count(uint32_t want)
{
    long cpus = want ? (long)want : sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (unsigned)cpus;
}

static bool search_init(search_t *s, const sa_graph_t *g, const cham_swapadvisor_options_t *o)
{
    memset(s, 0, sizeof *s);
    s->g = g;
    s->n_pop = o->population;
    s->n_kids = 4 * ((o->population + 1) / 2);
    size_t n = s->n_pop + s->n_kids;
    if (!sa_genes_init(&s->genes, g, o->mutation, o->schedule_mutation))
        return false;
    s->batch.g = g;
    s->batch.n_threads = thread_count(o->threads);
    for (unsigned i = 0; i < s->batch.n_threads; i++)
        if (!(s->batch.work[i] = sa_work_new(g))) {
            s->batch.n_threads = i;
            return false;
        }
    s->all = calloc(n, sizeof *s->all);
    s->weight = malloc(n * sizeof *s->weight);
    if (!s->all || !s->weight || !sa_chrom_alloc(g, &s->best))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!sa_chrom_alloc(g, &s->all[i]))
            return false;
    return true;
}

static void note_best(search_t *s, const sa_chrom_t *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (c[i].time_ns < s->best.time_ns)
            sa_chrom_copy(s->g, &s->best, &c[i]);
}

/* The first generation: the profile's order with one class per size, then
 * random pools, half of them (with reorder) with schedules mutated from
 * the profile's. */
static void first_generation(search_t *s, const cham_swapadvisor_options_t *o, sa_rng_t *rng)
{
    for (size_t i = 0; i < s->n_pop; i++)
        sa_genes_random(&s->genes, &s->all[i], rng, i % 2 && o->reorder ? o->schedule_mutation : 0,
                        i == 0);
    score(&s->batch, s->all, s->n_pop);
    /* The best starts as a whole chromosome, feasible or not: note_best
     * only replaces it by a faster one, and a search that finds none
     * feasible still ends with a legal schedule to report on. */
    sa_chrom_copy(s->g, &s->best, &s->all[0]);
    note_best(s, s->all, s->n_pop);
}

static void next_generation(search_t *s, const cham_swapadvisor_options_t *o, sa_rng_t *rng)
{
    const sa_graph_t *g = s->g;
    sa_chrom_t *kids = s->all + s->n_pop;
    for (size_t j = 0; j + 4 <= s->n_kids; j += 4) {
        uint32_t a = (uint32_t)(sa_rand(rng) % s->n_pop), b = (uint32_t)(sa_rand(rng) % s->n_pop);
        if (s->n_pop > 1 && a == b)
            b = (b + 1) % (uint32_t)s->n_pop;
        sa_chrom_t *k = &kids[j];
        sa_genes_cross(&s->genes, &s->all[a], &s->all[b], &k[0], &k[1], rng, o->reorder);
        /* The other two pairings of the two schedules and two pools. */
        sa_chrom_copy(g, &k[2], &k[0]);
        memcpy(k[2].order, k[1].order, g->n_ops * sizeof *k[2].order);
        sa_chrom_copy(g, &k[3], &k[1]);
        memcpy(k[3].order, k[0].order, g->n_ops * sizeof *k[3].order);
        /* Schedules mutate in the first two only: a random pick can ruin a
         * schedule, and the crossover alone keeps good ones mixing. */
        for (int m = 0; m < 4; m++)
            sa_genes_mutate(&s->genes, &k[m], rng, o->reorder && m < 2);
    }
    score(&s->batch, kids, s->n_kids);
    note_best(s, kids, s->n_kids);
    select_survivors(s->all, s->n_pop + s->n_kids, s->n_pop, s->best.time_ns, rng, s->weight);
}

static cham_status_t check_options(const cham_swapadvisor_options_t *o, char *err,
                                   size_t err_size)
{
    const char *field = NULL;
    if (o->population < 2 || o->population > 10000)
        field = "population (2..10000)";
    else if (o->generations > 1000000)
        field = "generations (0..1000000)";
    else if (!(o->search_seconds > 0) || !isfinite(o->search_seconds))
        field = "search_seconds (a finite number of seconds above 0)";
    else if (!(o->mutation >= 0 && o->mutation <= 1))
        field = "mutation (a probability, 0..1)";
    else if (!(o->schedule_mutation >= 0 && o->schedule_mutation <= 1))
        field = "schedule_mutation (a probability, 0..1)";
    else if (o->threads > 1024)
        field = "threads (0..1024)";
    if (!field)
        return CHAM_OK;
    cham_set_err(err, err_size, "swapadvisor planner: bad option %s", field);
    return CHAM_ERR_INVALID_ARG;
}

/* Whether one class per size or one class for all leaves a pool within
 * the usable bytes (a search whose first generation found none ends
 * early when neither does). */
static bool some_pool_fits(search_t *s)
{
    sa_chrom_t *c = &s->all[s->n_pop];
    for (size_t k = 0; k < s->g->n_ops; k++)   /* the repair's minimum depends on it */
        c->order[k] = (uint32_t)k;
    for (int coarse = 0; coarse < 2; coarse++) {
        for (size_t z = 0; z < s->g->n_sizes; z++)
            c->step[z] = z > 0 && !coarse;
        if (sa_genes_repair(&s->genes, c))
            return true;
    }
    return false;
}

/* Says why no pool fits: the op that needs the most bytes on the device
 * at once in the profile's order, its own tensors and the preexisting
 * ones still waiting for their first use (a tensor leaves only after a
 * use: sa_genes_repair). With any_order false, some schedule found runs
 * but the profile's op order (the one the runtime applies) does not. */
static void no_pool(const sa_graph_t *g, const cham_profile_view_t *v, uint64_t capacity,
                    bool any_order, char *err, size_t err_size)
{
    bool *seen = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *seen);
    uint64_t waiting = 0, most = 0, most_wait = 0;
    size_t at = 0, n_wait = 0, most_n_wait = 0;
    for (size_t t = 0; seen && t < g->n_tensors; t++)
        if (g->preexisting[t]) {
            waiting += g->bytes[t];
            n_wait++;
        }
    for (size_t k = 0; k < g->n_ops; k++) {
        uint64_t own = 0;
        for (uint32_t r = g->op_start[k]; r < g->op_start[k + 1]; r++) {
            uint32_t t = g->refs[r].tensor;
            own += g->bytes[t];
            if (seen && g->preexisting[t] && !seen[t]) {
                seen[t] = true;
                waiting -= g->bytes[t];
                n_wait--;
            }
        }
        if (own + waiting > most) {
            most = own + waiting;
            most_wait = waiting;
            most_n_wait = n_wait;
            at = k;
        }
    }
    free(seen);
    cham_op_token_t tok = g->n_ops ? v->ops[at].token : -1;
    const char *name = tok >= 0 && (size_t)tok < v->n_tokens ? v->token_names[tok] : "?";
    char why[200];
    if (most_n_wait)
        snprintf(why, sizeof why, "op %zu (%s) needs %llu bytes on the device at once: its "
                 "tensors and %zu more (%llu bytes) there since the step began, which wait for "
                 "their first use (a tensor leaves only after a use)", at, name,
                 (unsigned long long)most, most_n_wait, (unsigned long long)most_wait);
    else
        snprintf(why, sizeof why, "op %zu (%s) alone uses %llu bytes", at, name,
                 (unsigned long long)most);
    cham_set_err(err, err_size, "swapadvisor planner: no memory pool of %llu usable bytes "
                 "(capacity %llu) holds every op's tensors at once%s; %s, and a pool's objects "
                 "are as large as their size class's largest tensor",
                 (unsigned long long)g->usable, (unsigned long long)capacity,
                 any_order ? "" : " in the profile's op order (the one the policy is for)", why);
}

cham_status_t cham_plan_swapadvisor(const cham_profile_t *profile,
                                    const cham_planner_config_t *config,
                                    const cham_swapadvisor_options_t *options,
                                    cham_policy_t **out, cham_swapadvisor_result_t *result,
                                    char *err, size_t err_size)
{
    cham_policy_t *dummy;
    cham_profile_view_t v;
    uint64_t capacity = 0, usable = 0;
    if (result)
        memset(result, 0, sizeof *result);
    cham_status_t st = cham_gen_start("swapadvisor planner", profile, config, out ? out : &dummy,
                                      &v, &capacity, &usable, err, err_size);
    if (st != CHAM_OK)
        return st;
    cham_swapadvisor_options_t o = options ? *options : cham_swapadvisor_options_default();
    if ((st = check_options(&o, err, err_size)) != CHAM_OK)
        return st;

    double t0 = seconds_now();
    cham_gen_layers_t layers;
    sa_graph_t g = {0};
    search_t s;
    memset(&s, 0, sizeof s);
    if (!cham_gen_layers_build(&v, config, &layers))
        goto host_oom;
    bool built = sa_graph_build(&v, layers.op_ns, config->h2d_bandwidth, config->d2h_bandwidth,
                                usable, &g);
    cham_gen_layers_free(&layers);
    if (!built || !search_init(&s, &g, &o))
        goto host_oom;

    sa_rng_t rng = {.s = o.seed};
    first_generation(&s, &o, &rng);
    if (!isfinite(s.best.time_ns) && !some_pool_fits(&s)) {
        no_pool(&g, &v, capacity, true, err, err_size);
        search_free(&s);
        sa_graph_free(&g);
        return CHAM_ERR_OUT_OF_MEMORY;
    }
    uint32_t gens = 0;
    bool timed_out = false;
    while (gens < o.generations && !(timed_out = seconds_now() - t0 >= o.search_seconds)) {
        next_generation(&s, &o, &rng);
        gens++;
    }
    uint64_t evals = s.n_pop + (uint64_t)gens * s.n_kids;

    /* The best pool in the profile's order: what the runtime can apply.
     * Repaired for that order, whose preexisting tensors may wait longer
     * than in the best schedule's (more objects where it needs them). */
    sa_chrom_t fixed = s.all[s.n_pop];   /* a child's storage, free now */
    sa_chrom_copy(&g, &fixed, &s.best);
    for (size_t k = 0; k < g.n_ops; k++)
        fixed.order[k] = (uint32_t)k;
    sa_genes_repair(&s.genes, &fixed);
    sa_eval_result_t fr, br;
    sa_eval(&g, &fixed, s.batch.work[0], &fr, NULL, NULL, NULL, NULL);
    sa_eval(&g, &s.best, s.batch.work[0], &br, NULL, NULL, NULL, NULL);
    if (!isfinite(br.time_ns) || !isfinite(fr.time_ns)) {
        no_pool(&g, &v, capacity, !isfinite(br.time_ns), err, err_size);
        search_free(&s);
        sa_graph_free(&g);
        return CHAM_ERR_OUT_OF_MEMORY;
    }
    if (out && (st = sa_policy(profile, config, &g, &fixed, s.batch.work[0], capacity, out,
                               err, err_size)) != CHAM_OK) {
        search_free(&s);
        sa_graph_free(&g);
        return st;
    }
    if (result) {
        uint32_t *cls = s.genes.scratch;
        double ideal = 0;
        for (size_t k = 0; k < g.n_ops; k++)
            ideal += g.cost_ns[k];
        *result = (cham_swapadvisor_result_t){
            .step_ns = (uint64_t)(br.time_ns + 0.5),
            .ideal_ns = (uint64_t)(ideal + 0.5),
            .profile_order_ns = isfinite(fr.time_ns) ? (uint64_t)(fr.time_ns + 0.5) : UINT64_MAX,
            .swapped_in_bytes = br.in_bytes,
            .swapped_out_bytes = br.out_bytes,
            .swaps_in = br.n_in,
            .swaps_out = br.n_out,
            .n_classes = sa_classes(&g, s.best.step, cls),
            .generations = gens,
            .evaluations = evals,
            .search_seconds = seconds_now() - t0,
            .stopped_by_time = timed_out,
            .n_ops = g.n_ops,
            .schedule = malloc((g.n_ops ? g.n_ops : 1) * sizeof *result->schedule),
        };
        for (uint32_t k = 0; k < result->n_classes; k++) {
            uint32_t last = 0;
            for (size_t z = 0; z < g.n_sizes; z++)
                last = cls[z] == k ? (uint32_t)z : last;
            result->pool_bytes += s.best.cnt[k] * g.sizes[last];
        }
        if (result->schedule) {
            memcpy(result->schedule, s.best.order, g.n_ops * sizeof *result->schedule);
            for (size_t k = 0; k < g.n_ops; k++)
                result->reordered = result->reordered || s.best.order[k] != k;
        } else if (out) {
            cham_policy_free(*out);
            *out = NULL;
        }
        if (!result->schedule)
            goto host_oom;
    }
    search_free(&s);
    sa_graph_free(&g);
    return CHAM_OK;

host_oom:
    cham_set_err(err, err_size, "swapadvisor planner: out of host memory (%zu ops)", v.n_ops);
    search_free(&s);
    sa_graph_free(&g);
    return CHAM_ERR_HOST_OOM;
}
