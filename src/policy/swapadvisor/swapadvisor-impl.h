/* SwapAdvisor's internals, shared by its files and the tests:
 * sa_graph.c (the dataflow graph, schedule legality), sa_eval.c (Belady's
 * swap planning run inside the dataflow simulation), sa_genes.c (the
 * chromosome: crossover, mutation, repair), sa_search.c (the genetic
 * algorithm, its threads, the public entry point) and sa_policy.c (the
 * best candidate as a policy). docs/swapadvisor.md. */
#ifndef CHAM_POLICY_SWAPADVISOR_IMPL_H
#define CHAM_POLICY_SWAPADVISOR_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/profile.h"
#include "chameleon/swapadvisor.h"

/* ---- the dataflow graph (sa_graph.c) ------------------------------------- */

/* An op's use of one tensor (its uses of one storage merged). */
typedef struct sa_ref {
    uint32_t tensor;
    uint32_t use;                /* the profile's use (its first of the storage) */
    bool writes;                 /* some use of the op writes it */
    bool backed;                 /* after the op the caller's host copy holds it */
} sa_ref_t;

/* Invariants: refs[op_start[k] .. op_start[k + 1]) are op k's tensors, each
 * once; preds/succs are the dependency edges (a -> b: a before b), sorted
 * and without duplicates; sizes are the tensors' distinct byte counts in
 * increasing order, size_of[t] indexes them. */
typedef struct sa_graph {
    size_t n_ops, n_tensors, n_sizes;
    double *cost_ns;             /* n_ops */
    uint32_t *op_start;          /* n_ops + 1 */
    sa_ref_t *refs;
    uint32_t *pred_start, *preds;   /* n_ops + 1, edges */
    uint32_t *succ_start, *succs;
    uint64_t *bytes;             /* per tensor */
    uint64_t *storage;           /* the profile's storage id */
    uint32_t *size_of;           /* index into sizes */
    uint32_t *n_uses;            /* ops using the tensor */
    bool *persistent;            /* model state: lives across steps */
    bool *preexisting;           /* not persistent, but on the device when
                                    the step begins (first use a read) */
    uint64_t *sizes;             /* n_sizes */
    uint32_t *size_tensors;      /* per size: tensors of that size */
    uint32_t *size_pre;          /* per size: preexisting tensors */
    double h2d, d2h;             /* bytes per ns */
    uint64_t usable;             /* bytes the pool may take */
} sa_graph_t;

/* The graph of the profile's ops: RAW, WAR and WAW dependencies between
 * ops using one storage, and an op that uses no tensor stays between its
 * neighbours. cost_ns gives each op's time. false when the host is out of
 * memory. */
bool sa_graph_build(const cham_profile_view_t *v, const double *cost_ns, double h2d_bw,
                    double d2h_bw, uint64_t usable, sa_graph_t *g);
void sa_graph_free(sa_graph_t *g);

/* Whether order (n_ops op indices) is a permutation that keeps every
 * dependency; if not, why (naming the first broken edge). */
bool sa_schedule_legal(const sa_graph_t *g, const uint32_t *order, char *why, size_t why_size);

/* ---- the chromosome (sa_genes.c) ---------------------------------------- */

/* A schedule and a memory pool. Size class of size s: the sum of
 * step[1..s] (step[0] is 0, each step 0 or 1: consecutive sizes share a
 * class or take the next, the paper's CLS restriction); a class's objects
 * are as large as its largest size, and cnt[c] of them. */
typedef struct sa_chrom {
    uint32_t *order;             /* n_ops */
    uint8_t *step;               /* n_sizes */
    uint32_t *cnt;               /* n_sizes; the first n_classes used */
    double time_ns;              /* simulated step; INFINITY: infeasible */
} sa_chrom_t;

bool sa_chrom_alloc(const sa_graph_t *g, sa_chrom_t *c);
void sa_chrom_free(sa_chrom_t *c);
void sa_chrom_copy(const sa_graph_t *g, sa_chrom_t *dst, const sa_chrom_t *src);

/* The number of classes and, per size, its class (cls, n_sizes). */
uint32_t sa_classes(const sa_graph_t *g, const uint8_t *step, uint32_t *cls);

typedef struct sa_rng {
    uint64_t s;
} sa_rng_t;
uint64_t sa_rand(sa_rng_t *r);
double sa_rand_unit(sa_rng_t *r);   /* [0, 1) */

/* Genetic operators, run by one thread (scratch: 4 n_ops + 8 n_sizes). */
typedef struct sa_genes {
    const sa_graph_t *g;
    uint32_t *demand;            /* per size: most tensors of it live at once
                                    in the profile's order (initial counts) */
    uint8_t *seen;               /* per tensor, the repair's walk */
    uint32_t *scratch;
    double mutation, schedule_mutation;
} sa_genes_t;

bool sa_genes_init(sa_genes_t *x, const sa_graph_t *g, double mutation,
                   double schedule_mutation);
void sa_genes_free(sa_genes_t *x);

/* Fills c: order (profile order, or mutated from it with probability p
 * per pick), steps (all 1 with fine, else random) and counts from the
 * demand (randomly scaled unless fine), repaired. */
void sa_genes_random(sa_genes_t *x, sa_chrom_t *c, sa_rng_t *r, double p, bool fine);
/* The paper's crossover: two schedules and two pools from a and b. */
void sa_genes_cross(sa_genes_t *x, const sa_chrom_t *a, const sa_chrom_t *b, sa_chrom_t *o1,
                    sa_chrom_t *o2, sa_rng_t *r, bool reorder);
/* Mutates schedule (with reorder), classes and counts, then repairs. */
void sa_genes_mutate(sa_genes_t *x, sa_chrom_t *c, sa_rng_t *r, bool reorder);
/* Counts within [the fewest objects that run c's schedule, the tensors of
 * the class] and the pool within usable; false (counts at their minimum)
 * when even the minimum pool is too large. The minimum, per class, is the
 * most objects one position needs: its op's tensors and the preexisting
 * tensors not used yet (which cannot leave), so every pool repaired
 * within usable runs c's schedule. */
bool sa_genes_repair(sa_genes_t *x, sa_chrom_t *c);
/* The dataflow-scheduler mutation: a topological order that follows `in`
 * except that, with probability p, each pick is a random ready op. */
void sa_schedule_mutate(const sa_graph_t *g, const uint32_t *in, uint32_t *out, double p,
                        sa_rng_t *r, uint32_t *scratch);

/* ---- evaluation (sa_eval.c) --------------------------------------------- */

typedef enum sa_event_kind {
    SA_OUT,                      /* a resident tensor leaves (Belady) */
    SA_IN,                       /* an away tensor comes back for its use */
    SA_OUT_END,                  /* model state leaves after its last use,
                                    away when the next step begins */
} sa_event_kind_t;

typedef struct sa_event {
    sa_event_kind_t kind;
    uint32_t tensor;
    uint32_t at;                 /* position the planner decided it at (OUT:
                                    the op that needed the room; IN: the op
                                    that uses it) */
    uint32_t last;               /* OUT: position of its use before */
    uint32_t from;               /* IN: the OUT event (index) that freed its
                                    object; UINT32_MAX: a free one */
    double start, end;           /* the copy on its stream, ns */
} sa_event_t;

typedef struct sa_eval_result {
    double time_ns;              /* INFINITY: the pool cannot run it */
    uint64_t in_bytes, out_bytes;
    uint32_t n_in, n_out;
} sa_eval_result_t;

typedef struct sa_work sa_work_t;

/* Scratch for one thread's evaluations; NULL when out of host memory. */
sa_work_t *sa_work_new(const sa_graph_t *g);
void sa_work_free(sa_work_t *w);

/* Plans c's swaps with Belady's rule and simulates the step. With events,
 * also records every copy (*events, grown as needed, *n_events) and each
 * position's op start and end (start_ns, end_ns: n_ops each). Returns
 * false when the host ran out of memory recording. */
bool sa_eval(const sa_graph_t *g, const sa_chrom_t *c, sa_work_t *w, sa_eval_result_t *res,
             sa_event_t **events, size_t *n_events, double *start_ns, double *end_ns);

/* ---- the policy (sa_policy.c) ------------------------------------------- */

/* The policy of c, whose schedule must be the profile's order, planned
 * against capacity (g->usable of it usable). */
cham_status_t sa_policy(const cham_profile_t *profile, const cham_planner_config_t *config,
                        const sa_graph_t *g, const sa_chrom_t *c, sa_work_t *w,
                        uint64_t capacity, cham_policy_t **out, char *err, size_t err_size);

#endif
