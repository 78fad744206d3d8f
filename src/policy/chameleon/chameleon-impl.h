/* Internals of Chameleon's policy generator (paper §5, Algorithm 2),
 * shared by its files: mrl.c (the memory reduction list as a segment
 * tree), candidates.c (Eq. 2), placement.c (swap-in pre-trigger, swap-out
 * completion), refine.c and generate.c (Algorithm 2 and the entry point).
 * What it shares with the other planners is policy/plan-impl.h.
 * docs/policy.md explains the choices. */
#ifndef CHAM_POLICY_CHAMELEON_IMPL_H
#define CHAM_POLICY_CHAMELEON_IMPL_H

#include "policy/plan-impl.h"

/* ---- memory reduction list (mrl.c) -------------------------------------- */

/* The entries: the samples whose curve exceeds usable when the list is
 * built, each holding excess = curve - usable - bytes already removed
 * there. An MRE is an entry with excess > 0. Only those samples are stored
 * (no other sample can ever become one): the tree is over the entries, and
 * below[s] maps a sample to the entries before it. Excess only shrinks, so
 * an entry that reaches 0 leaves the list for good; nodes track the
 * entries still positive (count, smallest, largest), which makes a range
 * subtraction O(log n) amortised. */
typedef struct cham_mrl_node {
    int64_t minp, maxp;          /* over positive entries; meaningless if cnt 0 */
    int64_t lazy;                /* pending addition to the positive entries */
    uint32_t cnt;                /* positive entries below */
} cham_mrl_node_t;

typedef struct cham_mrl {
    size_t n;                    /* entries at construction: the tree's leaves */
    size_t samples;              /* memory samples */
    cham_mrl_node_t *t;          /* 4 n nodes, root 1 */
    uint32_t *below;             /* samples + 1: entries at samples < s */
    uint32_t *sample;            /* n: the sample of each entry */
    size_t initial;              /* entries at construction */
} cham_mrl_t;

bool cham_mrl_init(cham_mrl_t *m, const uint64_t *curve, size_t n, uint64_t usable);
void cham_mrl_free(cham_mrl_t *m);
/* Subtracts bytes from the entries of samples [lo, hi). */
void cham_mrl_subtract(cham_mrl_t *m, size_t lo, size_t hi, uint64_t bytes);
/* Entries in samples [lo, hi). */
size_t cham_mrl_count(cham_mrl_t *m, size_t lo, size_t hi);
/* The two above over a span of samples that may wrap past the step's end:
 * [lo, hi), or with wraps [lo, samples) and [0, hi) (model state away
 * from one step into the next). */
void cham_mrl_subtract_span(cham_mrl_t *m, size_t lo, size_t hi, bool wraps, uint64_t bytes);
size_t cham_mrl_count_span(cham_mrl_t *m, size_t lo, size_t hi, bool wraps);
/* The last entry in [lo, hi): true and *at, or false when there is none. */
bool cham_mrl_last(cham_mrl_t *m, size_t lo, size_t hi, size_t *at);
/* Whether the list holds an entry: O(1). */
bool cham_mrl_any(const cham_mrl_t *m);
/* The largest excess (0 when the list is empty) and, if any, its sample. */
uint64_t cham_mrl_max(cham_mrl_t *m, size_t *at);

/* ---- candidates (candidates.c) ------------------------------------------ */

typedef struct cham_gen_cand {
    uint32_t tensor;             /* index into the tensors */
    uint32_t n_mre;              /* entries in its window */
    double score;                /* Eq. 2 */
} cham_gen_cand_t;

/* The window of tensor t: samples [2 (f + 1), 2 start(layer(u) - 1)), the
 * samples where a swap could remove it. Empty (lo >= hi) when u's layer
 * is the first or the window closes before it opens. A tensor that wraps
 * has two: [lo, 2 n_ops) and [0, hi). */
void cham_gen_window(const cham_gen_layers_t *l, const cham_gen_tensor_t *t, bool at_use,
                     size_t *lo, size_t *hi);

/* The candidate list: tensors not yet chosen whose window holds an entry,
 * scored with Eq. 2 and sorted by descending score, then tensor index.
 * *cl is grown once to 2 n_t (the second half is the sort's scratch) and
 * reused by later rounds. false when the host is out of memory. */
bool cham_gen_candidates(const cham_gen_layers_t *l, const cham_gen_tensor_t *t, size_t n_t,
                         cham_mrl_t *mrl, bool at_use, double score_c, uint64_t max_bytes,
                         cham_gen_cand_t **cl, size_t *cap, size_t *n_cl);

/* ---- placement model (placement.c) ------------------------------------ */

/* Per-layer free transfer time of one link direction: a max segment tree
 * (nearest layer with enough time) and a Fenwick tree (sums over runs of
 * layers) over the same values. */
typedef struct cham_budget {
    size_t n, size;              /* layers, leaves (power of two) */
    uint64_t *t;                 /* 2 size nodes, root 1, leaf size + i */
    uint64_t *fw;                /* n + 1, Fenwick over the leaves */
} cham_budget_t;

/* A chosen copy in one direction's queue: issued at op `at` (a swap-out
 * when it ends, a swap-in when it begins), able to start at `ready`,
 * taking `t`, done at `done`; what follows it needs it done by `deadline`
 * (ns from the step's start, ops back to back). */
typedef struct cham_gen_copy {
    uint32_t at;
    uint64_t ready, t, done, deadline;
} cham_gen_copy_t;

/* Chosen copies by issue op, then the order chosen. slack[j] (n + 1 of
 * them) is how much later the copy before q[j] may be done without pushing
 * q[j] or one after it past its deadline: a copy tried at j is checked in
 * O(1), not by running the queue on (placement.c, queue_try). */
typedef struct cham_gen_queue {
    cham_gen_copy_t *q;
    uint64_t *slack;
    size_t n, cap;
} cham_gen_queue_t;

typedef struct cham_gen_sim {
    cham_gen_layers_t *layers;
    cham_budget_t h2d, d2h;      /* swap-ins and swap-outs: separate directions */
    double h2d_bw, d2h_bw;       /* bytes/s */
    uint32_t free_delay;         /* ops past the predicted completion */
    /* With queues (cham_gen_sim_queue), copies are placed in the order the
     * executor issues them, one after another in each direction, not into
     * the layers' free time (docs/policy.md, "The copy queues"). */
    uint64_t *op_end;            /* n_ops: when each op ends; NULL: no queue */
    bool early_in;               /* swap-ins as early as memory allows */
    /* A swap across the step's end that cannot come back in time after
     * the next step's entries it would cover may cover this step's tail
     * alone (placement.c, cham_gen_place). */
    bool cover_tails;
    /* Swap-ins may be issued when their use begins, the use waiting for
     * the whole copy: the last resort where no tensor is idle in a window
     * that ends a layer before its use (docs/policy.md, "Swap-ins at the
     * use"). */
    bool at_use;
    size_t n_ops;
    cham_gen_queue_t out, in;
} cham_gen_sim_t;

/* Where one candidate's swaps go. A transfer takes its time from the
 * layers [out_first, out_layer] (swap-out) and [in_layer, in_last]
 * (swap-in): one layer when a single layer has the time (the paper), a run
 * of layers otherwise (ours). */
typedef struct cham_gen_place {
    uint32_t out_first, out_layer, done_op, free_op;
    size_t q_out, q_in;          /* queues: where the swap-out and the swap-in go */
    uint64_t done_ns, in_done_ns;   /* queues: when they complete */
    uint32_t in_layer, in_last, in_op;
    uint64_t t_out, t_in;
    uint64_t stall_out_ns, stall_in_ns;   /* fallback waits */
    bool wraps;                  /* the swap-in is in the next step */
} cham_gen_place_t;

bool cham_gen_sim_init(cham_gen_sim_t *s, cham_gen_layers_t *l, double h2d_bw, double d2h_bw);
void cham_gen_sim_free(cham_gen_sim_t *s);
/* Places copies in the two queues from now on, timed by the layers'
 * op_ns; false when the host is out of memory. */
bool cham_gen_sim_queue(cham_gen_sim_t *s, size_t n_ops);
/* Finds a placement for t that removes at least one entry: true and *pl,
 * false when there is none. With allow_stall, a swap-in that fits no layer
 * goes into the layer before the use's with a predicted stall (§5.4.1), and
 * a swap-out that fits none completes in the layer of the last forward use,
 * the block's reuse waiting for it. */
bool cham_gen_place(cham_gen_sim_t *s, cham_mrl_t *mrl, const cham_gen_tensor_t *t,
                    bool allow_stall, cham_gen_place_t *pl);
/* t, chosen with a copy out, will find its bytes kept on the host (the
 * runtime's copy of an earlier swap-in): its copy leaves the swap-out
 * queue, the copies behind it done as early as they now can be. Nothing
 * to give back without the queues (the layers' budgets keep the time). */
void cham_gen_refund_out(cham_gen_sim_t *s, const cham_gen_tensor_t *t);
/* Takes the placement's time from its layers (or its place in the queue)
 * and its bytes off the MRL over samples [2 free_op, 2 in_op); false when
 * the host is out of memory. The layers' remaining_ns are left alone:
 * cham_gen_sim_report writes them once, at the end (a swap-in spanning a
 * run of layers would otherwise cost one write per layer of the run). */
bool cham_gen_commit(cham_gen_sim_t *s, cham_mrl_t *mrl, const cham_gen_tensor_t *t,
                     const cham_gen_place_t *pl);
/* Sets every layer's remaining_ns to its free host-to-device time. */
void cham_gen_sim_report(cham_gen_sim_t *s);

/* ---- refinement (refine.c) --------------------------------------------- */

/* refine.c: the blocks whose reuse the replay says waits for their copies
 * out given back later, where the copies end (of model state possibly in
 * the next step), and each swap-in that stalls tried at earlier ops, the
 * longest stall first; every sample an item is then held for stays
 * within usable, within a work limit; what stalls least in all kept, the
 * predictions updated (docs/policy.md, "Refinement"). false when the host
 * is out of memory. */
bool cham_gen_refine(cham_policy_t *p, const cham_gen_layers_t *l, const uint64_t *curve,
                     double h2d_bw, double d2h_bw);

#endif
