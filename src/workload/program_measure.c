/* What a program of a job is, measured by running it with unlimited memory
 * (docs/workloads.md, "Where the optimizer runs"): its step's time, the
 * lower bound of its profile at the run's budget, the host's work and the
 * host's chain ("The host's chain"); for a loop whose steps change, the
 * bound over its late steps ("The bound of a changing loop"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/grow.h"
#include "workload/workload-impl.h"

bool wl_bound_of(const cham_config_t *rc, const cham_device_info_t *info,
                 const cham_profile_t *profile, bool *feasible, double *bound_s,
                 double *floor_s)
{
    cham_planner_config_t pc = cham_planner_config_default();
    pc.capacity = cham_config_budget(rc, info->capacity);
    pc.h2d_bandwidth = info->h2d_bandwidth;
    pc.d2h_bandwidth = info->d2h_bandwidth;
    pc.recompute = true;       /* any mix, whatever the run's strategy */
    cham_step_bound_t b;
    char err[300];
    if (cham_plan_bound(profile, &pc, &b, err, sizeof err) != CHAM_OK)
        return false;          /* host memory */
    *feasible = b.feasible;
    *bound_s = b.feasible ? (double)b.bound_ns / 1e9 : INFINITY;
    if (floor_s)
        *floor_s = (double)b.compute_ns / 1e9;
    return true;
}

/* ---- the host's chain ------------------------------------------------------------- */

#define NONE UINT64_MAX

/* A task on the host's stream: its group, the op of the gradient copy it
 * waits for (0: none recorded) and that copy's least time, the op that
 * waits for it (NONE: none yet), its time and, for an update, the least
 * time of its weights' copy back (-1 for other tasks). Ops count from the
 * chain's first recorded step. */
typedef struct host_task {
    uint32_t group;
    uint64_t release, wait, ns;
    double copy_ns, back_ns;
} host_task_t;

/* A wait of the compute stream for a group's update: from op on, in step
 * `step`. */
typedef struct update_wait {
    uint32_t group;
    uint64_t op, step;
} update_wait_t;

/* An op's time on the compute stream and its collective's. */
typedef struct chain_op {
    double cost_ns, comm_ns;
    bool comm_waited;
} chain_op_t;

struct wl_chain {
    uint64_t base;               /* w->ops when the first recorded step began */
    uint64_t from_op;            /* the first op of the counted steps */
    uint64_t end_op, counted;    /* a changing loop's: the op after its counted
                                    steps and how many (NONE: steady state) */
    uint64_t step;               /* being run */
    uint32_t n_groups, group;    /* group: whose tasks are being queued */
    uint64_t release;
    double copy_ns;              /* the release's least time */
    double d2h_ns_per_byte, h2d_ns_per_byte;
    host_task_t *tasks;
    size_t n_tasks, cap_tasks;
    size_t *covered, *resolved;  /* per group: its tasks before these
                                    indices come before its last update,
                                    have their wait */
    update_wait_t *waits;        /* those in the counted steps */
    size_t n_waits, cap_waits;
    chain_op_t *ops;             /* the recorded ops */
    size_t n_ops, cap_ops;
    double *since;               /* between_waits_ns's: from a wait to each op */
    size_t cap_since;
    bool oom;
};

static void chain_free(wl_chain_t *c)
{
    if (!c)
        return;
    free(c->tasks);
    free(c->covered);
    free(c->resolved);
    free(c->waits);
    free(c->ops);
    free(c->since);
    free(c);
}

/* A chain of n_groups groups on a device of info's links; NULL when the
 * host is out of memory. */
static wl_chain_t *chain_new(uint32_t n_groups, const cham_device_info_t *info)
{
    wl_chain_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->n_groups = n_groups;
    c->from_op = c->end_op = NONE;   /* no wait counts before the counted steps */
    /* No copy is faster than its bytes over the link (the sim adds a
     * latency). */
    c->d2h_ns_per_byte = 1e9 / info->d2h_bandwidth;
    c->h2d_ns_per_byte = 1e9 / info->h2d_bandwidth;
    if (!(c->covered = calloc(n_groups, sizeof *c->covered)) ||
        !(c->resolved = calloc(n_groups, sizeof *c->resolved))) {
        chain_free(c);
        return NULL;
    }
    return c;
}

void wl_chain_copy(wl_chain_t *c, uint64_t op, uint64_t bytes)
{
    c->release = op - c->base;
    c->copy_ns = (double)bytes * c->d2h_ns_per_byte;
}

void wl_chain_work(wl_chain_t *c, uint32_t g)
{
    c->group = g;
}

void wl_chain_update(wl_chain_t *c, uint32_t g, uint64_t bytes_back)
{
    c->covered[g] = c->n_tasks;
    /* The update is the task just queued (the sim reports each as it is
     * queued). */
    if (c->n_tasks && c->tasks[c->n_tasks - 1].group == g)
        c->tasks[c->n_tasks - 1].back_ns = (double)bytes_back * c->h2d_ns_per_byte;
}

void wl_chain_wait(wl_chain_t *c, uint32_t g, uint64_t op)
{
    bool any = false;
    for (size_t k = c->resolved[g]; k < c->covered[g]; k++)
        if (c->tasks[k].group == g && c->tasks[k].wait == NONE) {
            c->tasks[k].wait = op - c->base;
            any = true;
        }
    c->resolved[g] = c->covered[g];
    if (!any || op - c->base < c->from_op)
        return;
    update_wait_t *w = cham_grow(c->waits, &c->cap_waits, c->n_waits + 1, sizeof *w, 256);
    if (!w) {
        c->oom = true;
        return;
    }
    c->waits = w;
    w[c->n_waits++] = (update_wait_t){.group = g, .op = op - c->base, .step = c->step};
}

/* A task of the group being queued, as the task hook reports it. */
static void chain_task(wl_chain_t *c, uint64_t ns)
{
    host_task_t *t = cham_grow(c->tasks, &c->cap_tasks, c->n_tasks + 1, sizeof *t, 256);
    if (!t) {
        c->oom = true;
        return;
    }
    c->tasks = t;
    CHAM_ASSERT((!c->n_tasks || c->release >= t[c->n_tasks - 1].release) &&
                "the host's tasks wait for the copies in the order queued");
    t[c->n_tasks++] = (host_task_t){.group = c->group, .release = c->release, .wait = NONE,
                                    .ns = ns, .copy_ns = c->release ? c->copy_ns : 0,
                                    .back_ns = -1};
}

/* Takes the times of a recorded step's ops from its profile. */
static bool chain_ops(wl_chain_t *c, const cham_profile_t *prof)
{
    cham_profile_view_t v;
    cham_profile_get(prof, &v);
    chain_op_t *o = cham_grow(c->ops, &c->cap_ops, c->n_ops + v.n_ops, sizeof *o, 1024);
    if (o)
        c->ops = o;
    double *since = cham_grow(c->since, &c->cap_since, c->n_ops + v.n_ops + 1, sizeof *since,
                              1024);
    if (since)
        c->since = since;
    if (!o || !since)
        return false;
    for (size_t k = 0; k < v.n_ops; k++)
        o[c->n_ops++] = (chain_op_t){.cost_ns = v.ops[k].has_cost ? v.ops[k].cost_ns : 0,
                                     .comm_ns = v.ops[k].comm_ns,
                                     .comm_waited = v.ops[k].comm_waited};
    return true;
}

/* c->since[k - a] for ops k in [a, b]: the least time from op a's start to
 * op k's. The compute stream runs one op after another; a collective
 * starts with its op at the earliest and after those ahead of it, and one
 * the op waits for holds the compute stream until it ends (the replay's
 * rule, policy.md "The lower bound"; the collectives' stream taken as free
 * at a). */
static void time_since(wl_chain_t *c, uint64_t a, uint64_t b)
{
    CHAM_ASSERT(a <= b && b <= c->n_ops && "an interval within the recorded ops");
    double now = 0, comm_end = 0;
    for (uint64_t k = a; k < b; k++) {
        const chain_op_t *o = &c->ops[k];
        c->since[k - a] = now;
        double end = now + o->cost_ns;
        if (o->comm_ns > 0) {
            comm_end = fmax(now, comm_end) + o->comm_ns;
            if (o->comm_waited)
                end = fmax(end, comm_end);
        }
        now = end;
    }
    c->since[b - a] = now;
}

static int by_group_then_op(const void *a, const void *b)
{
    const update_wait_t *x = a, *y = b;
    if (x->group != y->group)
        return (x->group > y->group) - (x->group < y->group);
    return (x->op > y->op) - (x->op < y->op);
}

/* The time from op a to op b (a group's consecutive waits for its
 * updates) is at least the ops' between them (time_since). And for any op
 * t in [a, b], over the host's tasks that wait for a gradient copy at or
 * after t and for which an op up to b waits (one host stream): none
 * starts before the ops up to its copy and the copy, their time adds up,
 * and the last to end is an update (a group's update comes after its
 * other tasks) whose weights are copied back before the op that waits
 * for it. Which other tasks the host's worker queues before them depends
 * on the run's timing, which any policy changes, so those do not count.
 * tasks: in the order queued, which is that of their copies. */
static double between_waits_ns(wl_chain_t *c, uint64_t a, uint64_t b)
{
    time_since(c, a, b);
    double best = c->since[b - a], work_ns = 0, first_start = INFINITY, back_ns = INFINITY;
    size_t lo = 0, hi = c->n_tasks;   /* past the last task released at or before b */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->tasks[mid].release <= b)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t k = lo; k-- > 0 && c->tasks[k].release >= a;) {
        const host_task_t *t = &c->tasks[k];
        if (t->wait > b)
            continue;
        work_ns += (double)t->ns;
        first_start = fmin(first_start, c->since[t->release - a] + t->copy_ns);
        if (t->back_ns >= 0)
            back_ns = fmin(back_ns, t->back_ns);
        if (k == 0 || c->tasks[k - 1].release != t->release)
            best = fmax(best, first_start + work_ns + (back_ns < INFINITY ? back_ns : 0));
    }
    return best;
}

/* The largest over the groups of the mean time a step their chain takes
 * in the counted steps (0: none has one). In a steady state that is from
 * a group's first wait to its last, which sit at the same place in their
 * steps (a group that waited in one step has none). In a loop that
 * changes they need not (an evaluation's forward reads the weights
 * earlier), so there the counted steps are at least the interval up to a
 * group's first wait in them, those between its waits and the ops from
 * its last wait to their end. Once, when the run is over: it sorts the
 * waits. */
static double chain_bound_s(wl_chain_t *c)
{
    if (c->n_waits)              /* none: the array was never grown (NULL) */
        qsort(c->waits, c->n_waits, sizeof *c->waits, by_group_then_op);
    bool steady = c->end_op == NONE;
    double best = 0;
    for (size_t i = 0, j; i < c->n_waits; i = j) {
        const update_wait_t *w = &c->waits[i];
        size_t last = i;         /* the last wait counted */
        for (j = i + 1; j < c->n_waits && c->waits[j].group == w->group; j++)
            if (steady || c->waits[j].op < c->end_op)
                last = j;
        if (!steady && w->op >= c->end_op)
            continue;
        double sum_ns = 0;
        for (size_t k = i; k < last; k++)
            sum_ns += between_waits_ns(c, c->waits[k].op, c->waits[k + 1].op);
        if (steady) {
            if (c->waits[last].step > w->step)
                best = fmax(best, sum_ns / (double)(c->waits[last].step - w->step));
            continue;
        }
        sum_ns += between_waits_ns(c, c->from_op, w->op);
        time_since(c, c->waits[last].op, c->end_op);
        sum_ns += c->since[c->end_op - c->waits[last].op];
        best = fmax(best, sum_ns / (double)c->counted);
    }
    return best * 1e-9;
}

/* ---- runs with unlimited memory --------------------------------------------------- */

/* The host stream's busy time for the work queued from `from` on (host
 * time), not the updates of steps before that run on into it
 * (cham_workload_wait); the tasks to the chain while it records. */
typedef struct host_busy {
    int stream;
    uint64_t from, busy_ns;
    wl_chain_t *chain;
} host_busy_t;

static void on_task(const cham_task_record_t *t, void *user)
{
    host_busy_t *h = user;
    if (t->stream_id != h->stream)
        return;
    if (t->enqueue_ns >= h->from)
        h->busy_ns += t->end_ns - t->start_ns;
    /* The sim reports a task as it is queued: the chain's group and copy
     * are the task's. */
    if (h->chain)
        chain_task(h->chain, t->end_ns - t->start_ns);
}

/* A run of a program with unlimited memory, the host's busy time followed
 * by a task hook; with the optimizer on the host, the host's chain from
 * step chain_from on (recorded from the step before: its updates are
 * what the first counted waits wait for). */
typedef struct unlimited {
    cham_context_t *ctx;
    cham_device_t *dev;
    cham_workload_t *w;
    host_busy_t h;
    wl_chain_t *chain;
    uint64_t chain_from;
} unlimited_t;

static void unlimited_close(unlimited_t *u)
{
    if (u->dev)
        cham_device_set_task_hook(u->dev, NULL, NULL);
    if (u->w)
        u->w->chain = NULL;
    chain_free(u->chain);
    cham_workload_free(u->w);
    cham_context_free(u->ctx);
}

/* Opens u for job m at rc's budget, the chain counted from step
 * chain_from (NONE: none). False when m cannot run, its state does not
 * fit or the host is out of memory (u is closed then). */
static bool unlimited_open(const cham_config_t *rc, const cham_device_info_t *info,
                           const cham_model_config_t *m, uint64_t chain_from, unlimited_t *u)
{
    *u = (unlimited_t){.h = {.stream = -1, .from = NONE}, .chain_from = chain_from};
    char why[1024];
    if (cham_model_validate(m, why, sizeof why) != CHAM_OK ||
        !wl_state_fits(m, info->capacity, rc->pinned_budget, cham_config_moves_model_state(rc),
                       why, sizeof why))
        return false;
    cham_config_t uc = *rc;
    cham_strategy_apply(CHAM_STRATEGY_IDEAL, &uc);
    if (cham_context_new(&uc, &u->ctx) != CHAM_OK)
        return false;
    cham_context_set_log(u->ctx, wl_silent_log, NULL);
    u->dev = cham_context_device(u->ctx);
    cham_status_t st = cham_workload_new(u->ctx, m, &u->w, why, sizeof why);
    if (st == CHAM_OK && u->w->host) {
        u->h.stream = cham_stream_id(u->w->host);
        if (chain_from != NONE && !(u->chain = chain_new(u->w->n_groups, info)))
            st = CHAM_ERR_HOST_OOM;
        if (st == CHAM_OK)
            st = cham_device_set_task_hook(u->dev, on_task, &u->h);
    }
    if (st != CHAM_OK)
        unlimited_close(u);
    return st == CHAM_OK;
}

/* Runs step s to its end; a profile of it where asked for or the chain
 * records it (it needs the ops' costs). */
static cham_status_t unlimited_step(unlimited_t *u, uint64_t s, bool profile)
{
    wl_chain_t *c = u->chain;
    bool record = c && s + 1 >= u->chain_from;
    if (record) {
        if (!c->n_ops)
            c->base = u->w->ops;
        if (s == u->chain_from)
            c->from_op = u->w->ops - c->base;
        c->step = s;
        u->h.chain = u->w->chain = c;
    }
    if (profile || record)
        cham_context_request_profile(u->ctx);
    cham_status_t st = cham_workload_step(u->w, s, NULL);
    if (st == CHAM_OK)
        st = cham_workload_wait(u->w);
    const cham_profile_t *prof = cham_context_last_profile(u->ctx);
    if (st == CHAM_OK && record && (c->oom || !prof || !chain_ops(c, prof)))
        st = CHAM_ERR_HOST_OOM;
    CHAM_ASSERT((st != CHAM_OK || !record || c->n_ops == u->w->ops - c->base) &&
                "the profiles have the ops the workload dispatched");
    u->h.chain = u->w->chain = NULL;
    return st;
}

/* ---- a program's step ------------------------------------------------------------- */

bool wl_program_measure(const cham_config_t *rc, const cham_device_info_t *info,
                        const cham_model_config_t *m, bool with_bound, wl_program_t *p)
{
    /* The chain of a loop whose steps change is its loop bound's
     * (wl_loop_bound). Here, from step 1 to step 2. */
    cham_model_config_t um = wl_training_steps(m);
    unlimited_t u;
    if (!unlimited_open(rc, info, &um, cham_model_loop_changes(m) ? NONE : 1, &u))
        return false;
    cham_status_t st = CHAM_OK;
    uint64_t t0 = 0;
    for (uint64_t s = 0; s < 3 && st == CHAM_OK; s++) {
        if (s == 2)
            u.h.from = t0 = cham_device_host_time(u.dev);
        st = unlimited_step(&u, s, s == 2 && with_bound);
    }
    const cham_profile_t *prof = cham_context_last_profile(u.ctx);
    bool feasible = !with_bound;
    bool ok = st == CHAM_OK &&
              (!with_bound || (prof && wl_bound_of(rc, info, prof, &feasible, &p->bound_s, NULL)));
    p->ideal_s = (double)(cham_device_host_time(u.dev) - t0) * 1e-9;
    p->host_s = (double)u.h.busy_ns * 1e-9;
    p->chain_s = ok && u.chain ? chain_bound_s(u.chain) : 0;
    unlimited_close(&u);
    return ok && feasible;
}

double wl_program_step_bound(const wl_program_t *p)
{
    return fmax(p->bound_s, fmax(p->host_s, p->chain_s));
}

double wl_program_bound(const wl_program_t *p)
{
    return p->loop_s > 0 ? p->loop_s : wl_program_step_bound(p);
}

/* ---- a loop whose steps change ---------------------------------------------------- */

/* What a step's bound depends on, folded into 64 bits: per op its kind,
 * cost, collective and memory, per use the tensor's bytes and where its
 * storage was used before (not ids or addresses, which differ from step
 * to step). Steps of one kind (an evaluation, an accumulation) have one
 * fingerprint. */
static uint64_t fingerprint(const cham_profile_t *prof)
{
    cham_profile_view_t v;
    cham_profile_get(prof, &v);
    uint64_t h = wl_hash(v.n_ops, v.n_uses, v.capacity);
    for (size_t k = 0; k < v.n_ops; k++) {
        const cham_profile_op_t *o = &v.ops[k];
        uint64_t cost, comm;
        memcpy(&cost, &o->cost_ns, sizeof cost);
        memcpy(&comm, &o->comm_ns, sizeof comm);
        h = wl_hash(h, (uint64_t)o->token << 32 | (uint64_t)o->phase << 16 |
                           (uint64_t)o->recomputable << 2 | (uint64_t)o->has_cost << 1 |
                           o->comm_waited,
                    (uint64_t)(uint32_t)o->block << 32 | o->n_uses);
        h = wl_hash(h, o->mem_before, o->mem_after);
        h = wl_hash(h, cost, comm);
    }
    for (size_t k = 0; k < v.n_uses; k++) {
        const cham_tensor_use_t *u = &v.uses[k];
        h = wl_hash(h, u->bytes, u->storage_bytes);
        h = wl_hash(h, u->history, (uint64_t)u->use_count << 8 | (uint64_t)u->dtype << 3 |
                                       (uint64_t)u->output << 2 | (uint64_t)u->persistent << 1 |
                                       u->host_backed);
    }
    return h;
}

/* The bounds of the kinds of step seen so far, by fingerprint: most loops
 * have a few, each bounded once. */
#define KINDS 64
typedef struct kinds {
    uint64_t print[KINDS];
    double bound_s[KINDS];
    size_t n;
} kinds_t;

/* The bound of prof's step at rc's budget; false without host memory. A
 * step the profile's bound finds no fit for counts its ops' time alone:
 * the loop ran it (an accumulation step's profile does not let its
 * gradients, alive across the step's start, leave; chameleon-swap runs
 * such a loop of GPT-2's shape at 60%, its bound was none). */
static bool kind_bound(kinds_t *k, const cham_config_t *rc, const cham_device_info_t *info,
                       const cham_profile_t *prof, double *bound_s)
{
    uint64_t print = fingerprint(prof);
    for (size_t i = 0; i < k->n; i++)
        if (k->print[i] == print) {
            *bound_s = k->bound_s[i];
            return true;
        }
    bool fits;
    double floor_s;
    if (!wl_bound_of(rc, info, prof, &fits, bound_s, &floor_s))
        return false;
    if (!fits)
        *bound_s = floor_s;
    if (k->n < KINDS) {
        k->print[k->n] = print;
        k->bound_s[k->n++] = *bound_s;
    }
    return true;
}

bool wl_loop_bound(const cham_config_t *rc, const cham_device_info_t *info,
                   const cham_model_config_t *m, uint64_t steps, double *bound_s)
{
    uint64_t from = steps / 2;
    unlimited_t u;
    if (steps == 0 || !unlimited_open(rc, info, m, from, &u))
        return false;
    kinds_t *kinds = calloc(1, sizeof *kinds);
    double sum_s = 0;
    cham_status_t st = kinds ? CHAM_OK : CHAM_ERR_HOST_OOM;
    for (uint64_t s = 0; s < steps && st == CHAM_OK; s++) {
        if (s == from)
            u.h.from = cham_device_host_time(u.dev);
        if ((st = unlimited_step(&u, s, s >= from)) != CHAM_OK || s < from)
            continue;
        const cham_profile_t *prof = cham_context_last_profile(u.ctx);
        double step_s;
        if (prof && kind_bound(kinds, rc, info, prof, &step_s))
            sum_s += step_s;
        else
            st = CHAM_ERR_HOST_OOM;
    }
    if (u.chain) {
        u.chain->end_op = u.chain->n_ops;
        u.chain->counted = steps - from;
    }
    double n = (double)(steps - from);
    *bound_s = fmax(fmax(sum_s / n, (double)u.h.busy_ns * 1e-9 / n),
                    u.chain ? chain_bound_s(u.chain) : 0);
    free(kinds);
    unlimited_close(&u);
    return st == CHAM_OK;
}
