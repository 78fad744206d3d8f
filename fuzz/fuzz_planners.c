/* Fuzz target: every planner on training-shaped steps, and each planner's
 * policy replayed through the runtime (docs/fuzzing.md, "fuzz_planners").
 * The input is no file: its bytes drive a generator of one training step
 * (prog_t). Layers of a forward pass make activations from the layer
 * before (sometimes through a view of half of it, sometimes through a
 * second op), a loss reads the last and the labels, the backward reads the
 * saved activations in reverse and makes the gradients, the optimizer
 * updates parameters, gradients and states in place; now and then an op
 * uses no tensor. Parameters, optimizer states and (by a byte) gradients
 * are persistent; the input batch and labels are filled by the host before
 * the step (on the device when it begins), the rest is transient.
 *
 * The step runs twice on an unconstrained sim for its detailed profile.
 * Then, at a capacity the input picks (a fifth to 1.5 times the profile's
 * peak), Chameleon's planner (with and without recomputation), vDNN's,
 * SwapAdvisor's (a small bounded search), HyperOffload's and ProTrain's
 * estimators and search plan it: a policy they return must pass the policy
 * file's invariants (it saves), Chameleon's must fit the usable memory,
 * SwapAdvisor's result must agree with itself, HyperOffload's refinement must not make it worse, a
 * refusal must say why. Last, the same ops are dispatched, as a framework
 * would, for several steps on a context of that capacity under each
 * runtime planner (chameleon, vdnn, capuchin, swapadvisor, hyperoffload),
 * the sim's hazard detector on: every call must return OK (or run out of
 * device memory, when a single op cannot fit), and no hazard may occur.
 * Seeds: fuzz/corpus/planners/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "chameleon/hyperoffload.h"
#include "chameleon/policy.h"
#include "chameleon/profile.h"
#include "chameleon/protrain.h"
#include "chameleon/swapadvisor.h"
#include "memfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LAYERS 6
#define MAX_TENSORS 64
#define MAX_EVENTS 256
#define MAX_IO 5

/* ---- the program ---------------------------------------------------------- */

typedef enum ev_kind { EV_NEW, EV_FILL, EV_FREE, EV_OP, EV_PHASE, EV_BLOCK } ev_kind_t;

typedef struct ev {
    ev_kind_t kind;
    int arg;                     /* NEW/FILL/FREE: tensor; OP: token; PHASE, BLOCK */
    int in[MAX_IO], n_in;        /* OP: tensors read (-1 - t: a view of t's first half) */
    int out[MAX_IO], n_out;      /* OP: tensors written */
} ev_t;

typedef struct prog {
    size_t bytes[MAX_TENSORS];
    bool persistent[MAX_TENSORS];  /* made once, before the first step */
    int n_tensors;
    ev_t ev[MAX_EVENTS];         /* one step */
    int n_ev;
    char tokens[32][16];
    int n_tokens;
} prog_t;

/* The input, read a byte at a time; zeros once it runs out. */
typedef struct input {
    const uint8_t *p;
    size_t n, at;
} input_t;

static uint32_t pick(input_t *in, uint32_t n)
{
    uint8_t b = in->at < in->n ? in->p[in->at++] : 0;
    return n ? b % n : 0;
}

static int token(prog_t *p, const char *name)
{
    for (int i = 0; i < p->n_tokens; i++)
        if (strcmp(p->tokens[i], name) == 0)
            return i;
    snprintf(p->tokens[p->n_tokens], sizeof p->tokens[0], "%s", name);
    return p->n_tokens++;
}

static int tensor(prog_t *p, size_t bytes, bool persistent)
{
    p->bytes[p->n_tensors] = bytes;
    p->persistent[p->n_tensors] = persistent;
    return p->n_tensors++;
}

static void event(prog_t *p, ev_kind_t kind, int arg)
{
    p->ev[p->n_ev++] = (ev_t){.kind = kind, .arg = arg};
}

static void op(prog_t *p, const char *name, const int *in, int n_in, const int *out, int n_out)
{
    ev_t *e = &p->ev[p->n_ev++];
    *e = (ev_t){.kind = EV_OP, .arg = token(p, name), .n_in = n_in, .n_out = n_out};
    for (int i = 0; i < n_in; i++)
        e->in[i] = in[i];
    for (int i = 0; i < n_out; i++)
        e->out[i] = out[i];
}

/* A transient tensor made now (NEW) and, with fill, written by the host. */
static int fresh(prog_t *p, size_t bytes, bool fill)
{
    int t = tensor(p, bytes, false);
    event(p, EV_NEW, t);
    if (fill)
        event(p, EV_FILL, t);
    return t;
}

static void gen(input_t *in, prog_t *p)
{
    memset(p, 0, sizeof *p);
    int n_layers = 1 + (int)pick(in, MAX_LAYERS);
    size_t unit = (size_t)(1 + pick(in, 8)) << 14;   /* 16..128 KiB */
    bool grads_persist = pick(in, 2);
    int w[MAX_LAYERS], g[MAX_LAYERS], m[MAX_LAYERS];
    for (int l = 0; l < n_layers; l++) {
        w[l] = tensor(p, unit * (1 + pick(in, 4)), true);
        g[l] = grads_persist ? tensor(p, p->bytes[w[l]], true) : -1;
        m[l] = pick(in, 2) ? tensor(p, 2 * p->bytes[w[l]], true) : -1;
    }
    int x = fresh(p, unit * (1 + pick(in, 4)), true), y = fresh(p, unit, true);
    event(p, EV_PHASE, CHAM_PHASE_FORWARD);
    int layer_in[MAX_LAYERS], saved[MAX_LAYERS], extra[MAX_LAYERS], prev = x;
    char name[16];
    for (int l = 0; l < n_layers; l++) {
        event(p, EV_BLOCK, l);
        layer_in[l] = prev;
        bool view = pick(in, 4) == 0 && p->bytes[prev] >= 2;
        int a = fresh(p, unit * (1 + pick(in, 4)), false);
        int ins[] = {view ? -1 - prev : prev, w[l]};
        snprintf(name, sizeof name, "fwd%d", l);
        op(p, name, ins, 2, &a, 1);
        saved[l] = a;
        extra[l] = -1;
        if (pick(in, 3) == 0) {          /* a second op: its output goes on */
            int b = fresh(p, p->bytes[a], false);
            snprintf(name, sizeof name, "act%d", l);
            op(p, name, &a, 1, &b, 1);
            extra[l] = b;
            prev = b;
        } else {
            prev = a;
        }
        if (pick(in, 6) == 0)
            op(p, "sync", NULL, 0, NULL, 0);
    }
    event(p, EV_BLOCK, -1);
    int d = fresh(p, p->bytes[prev], false), loss_in[] = {prev, y};
    op(p, "loss", loss_in, 2, &d, 1);
    event(p, EV_FREE, y);
    event(p, EV_PHASE, CHAM_PHASE_BACKWARD);
    for (int l = n_layers - 1; l >= 0; l--) {
        event(p, EV_BLOCK, l);
        int da = fresh(p, p->bytes[layer_in[l]], false);
        int grad = g[l] >= 0 ? g[l] : (g[l] = fresh(p, p->bytes[w[l]], false));
        int ins[] = {d, saved[l], layer_in[l], w[l]}, outs[] = {da, grad};
        snprintf(name, sizeof name, "bwd%d", l);
        op(p, name, ins, 4, outs, 2);
        event(p, EV_FREE, d);
        event(p, EV_FREE, saved[l]);
        if (extra[l] >= 0)
            event(p, EV_FREE, extra[l]);
        d = da;
    }
    event(p, EV_FREE, d);
    event(p, EV_FREE, x);
    event(p, EV_BLOCK, -1);
    event(p, EV_PHASE, CHAM_PHASE_OPTIMIZER);
    for (int l = 0; l < n_layers; l++) {
        int outs[] = {w[l], m[l]};
        snprintf(name, sizeof name, "opt%d", l);
        op(p, name, &g[l], 1, outs, m[l] >= 0 ? 2 : 1);
        if (!grads_persist)
            event(p, EV_FREE, g[l]);
    }
}

/* ---- running it ------------------------------------------------------------ */

typedef struct run {
    cham_context_t *ctx;
    cham_tensor_t *t[MAX_TENSORS];
    cham_op_token_t tok[32];
    bool oom;                    /* stopped: the device ran out of memory */
} run_t;

/* OK goes on; running out of device memory stops the run (an op may need
 * more than the capacity); anything else is a finding. */
static bool ok(run_t *r, cham_status_t st, const char *call)
{
    if (st == CHAM_OK)
        return true;
    if (st == CHAM_ERR_OUT_OF_MEMORY) {
        r->oom = true;
        return false;
    }
    char detail[600];
    snprintf(detail, sizeof detail, "%s: %s: %s", call, cham_status_string(st),
             cham_context_last_error(r->ctx));
    fuzz_fail("a runtime call failed", detail);
}

static bool make(run_t *r, const prog_t *p, int t, bool fill)
{
    if (!ok(r, cham_tensor_new(r->ctx, p->bytes[t], CHAM_DTYPE_F32, "t", &r->t[t]), "new"))
        return false;
    if (fill && !cham_tensor_data(r->t[t])) {   /* the host writes it */
        r->oom = true;
        return false;
    }
    return true;
}

static bool dispatch(run_t *r, const ev_t *e)
{
    cham_tensor_t *ins[MAX_IO], *outs[MAX_IO], *views[MAX_IO];
    int n_views = 0;
    bool good = true;
    for (int i = 0; i < e->n_in && good; i++) {
        int t = e->in[i] < 0 ? -1 - e->in[i] : e->in[i];
        ins[i] = r->t[t];
        if (e->in[i] < 0) {
            size_t half = cham_tensor_bytes(r->t[t]) / 2;
            good = ok(r, cham_tensor_view(r->t[t], 0, half, CHAM_DTYPE_U8, "view",
                                          &views[n_views]), "view");
            if (good)
                ins[i] = views[n_views++];
        }
    }
    for (int i = 0; i < e->n_out; i++)
        outs[i] = r->t[e->out[i]];
    if (good && ok(r, cham_op_begin(r->ctx, r->tok[e->arg], ins, (size_t)e->n_in, outs,
                                    (size_t)e->n_out), "op_begin"))
        good = ok(r, cham_op_end(r->ctx), "op_end");
    else
        good = false;
    for (int i = 0; i < n_views; i++)
        cham_tensor_release(views[i]);
    return good;
}

static bool step(run_t *r, const prog_t *p)
{
    for (int i = 0; i < p->n_ev; i++) {
        const ev_t *e = &p->ev[i];
        bool good = true;
        switch (e->kind) {
        case EV_NEW: good = make(r, p, e->arg, false); break;
        case EV_FILL:
            good = cham_tensor_data(r->t[e->arg]) != NULL;
            r->oom = r->oom || !good;
            break;
        case EV_FREE:
            cham_tensor_release(r->t[e->arg]);
            r->t[e->arg] = NULL;
            break;
        case EV_OP: good = dispatch(r, e); break;
        case EV_PHASE: good = ok(r, cham_phase(r->ctx, (cham_phase_t)e->arg), "phase"); break;
        case EV_BLOCK: good = ok(r, cham_set_block(r->ctx, e->arg), "set_block"); break;
        }
        if (!good)
            return false;
    }
    return ok(r, cham_step_end(r->ctx), "step_end");
}

/* Runs n_steps of p on a context of config c; with profile, asks for a
 * detailed profile of the last step and hands it to plan_all before the
 * context goes. */
typedef void (*with_profile_t)(const cham_profile_t *profile, void *user);

/* The runtime's log lines (stage changes, on-demand swaps): with
 * FUZZ_VERBOSE=1 only, as libFuzzer's own output should stay readable. */
static void quiet_log(const char *line, void *user)
{
    (void)user;
    fuzz_note("log", line);
}

static void run(const prog_t *p, const cham_config_t *c, int n_steps, with_profile_t with,
                void *user)
{
    run_t r = {0};
    if (cham_context_new(c, &r.ctx) != CHAM_OK)
        fuzz_fail("a context does not open", cham_context_last_error(NULL));
    cham_context_set_log(r.ctx, quiet_log, NULL);
    for (int i = 0; i < p->n_tokens; i++)
        if (cham_op_token(r.ctx, p->tokens[i], &r.tok[i]) != CHAM_OK)
            fuzz_fail("an op token", p->tokens[i]);
    bool good = true;
    for (int t = 0; t < p->n_tensors && good; t++)
        if (p->persistent[t])
            good = make(&r, p, t, true);
    for (int s = 0; s < n_steps && good; s++) {
        if (with && s == n_steps - 1)
            cham_context_request_profile(r.ctx);
        good = step(&r, p);
    }
    if (with && good) {
        const cham_profile_t *prof = cham_context_last_profile(r.ctx);
        if (!prof)
            fuzz_fail("an unconstrained run left no profile", NULL);
        with(prof, user);
    }
    if (!with && !r.oom && good) {
        uint64_t hazards = cham_device_hazard_count(cham_context_device(r.ctx));
        if (hazards) {
            char detail[64];
            snprintf(detail, sizeof detail, "%llu hazards under planner %s",
                     (unsigned long long)hazards, cham_planner_kind_name(c->planner));
            fuzz_fail("the hazard detector reported a race", detail);
        }
    }
    for (int t = 0; t < MAX_TENSORS; t++)
        cham_tensor_release(r.t[t]);
    cham_context_free(r.ctx);
}

/* ---- the planners --------------------------------------------------------- */

static fuzz_memfile_t policy_out;

typedef struct plan_in {
    uint64_t capacity, reserve, min_swap;
    uint32_t generations;
    uint64_t seed;
} plan_in_t;

/* The policy file's invariants (saving checks them) and, where the
 * planner promises it, a fit. */
static void check_policy(cham_policy_t *pol, bool must_fit, const char *who)
{
    char err[512];
    cham_policy_view_t v;
    cham_policy_get(pol, &v);
    if (must_fit && v.predicted_peak > v.usable)
        fuzz_fail("a successful plan predicts a peak above the usable memory", who);
    if (cham_policy_save_json(pol, policy_out.path, err, sizeof err) != CHAM_OK)
        fuzz_fail("a planned policy does not save", err);
    cham_policy_free(pol);
}

/* A refusal says why: a sentence, and only the statuses planners document. */
static void check_refusal(cham_status_t st, const char *err, const char *who)
{
    if (st != CHAM_ERR_OUT_OF_MEMORY && st != CHAM_ERR_INVALID_ARG)
        fuzz_fail("a planner failed with an unexpected status", who);
    if (!err[0])
        fuzz_fail("a planner refused without a message", who);
    fuzz_note(who, err);
}

static void plan_protrain(const cham_profile_t *prof, const cham_planner_config_t *cfg)
{
    const cham_preset_t *preset = cham_preset_find(cham_preset_default_name());
    cham_protrain_device_t dev = {
        .capacity = cfg->capacity, .reserve = cfg->reserve,
        .h2d_bandwidth = cfg->h2d_bandwidth, .d2h_bandwidth = cfg->d2h_bandwidth,
        .host_flops = preset->host_flops > 0 ? preset->host_flops : 1e11,
        .host_mem_bandwidth = 2e10,
    };
    cham_protrain_model_t *m = NULL;
    char err[512] = "";
    cham_status_t st = cham_protrain_model_new(prof, &dev, &m, err, sizeof err);
    if (st != CHAM_OK) {
        check_refusal(st, err, "protrain model");
        return;
    }
    cham_protrain_plan_t plan;
    err[0] = '\0';
    st = cham_protrain_search(m, &dev, &plan, err, sizeof err);
    if (st != CHAM_OK)
        check_refusal(st, err, "protrain search");
    else if (!plan.estimate.fits)
        fuzz_fail("protrain's search chose a configuration that does not fit", NULL);
    cham_protrain_model_free(m);
}

static void plan_all(const cham_profile_t *prof, void *user)
{
    const plan_in_t *pi = user;
    const cham_preset_t *preset = cham_preset_find(cham_preset_default_name());
    cham_planner_config_t cfg = cham_planner_config_default();
    cfg.capacity = pi->capacity;
    cfg.reserve = pi->reserve;
    cfg.min_swap_bytes = pi->min_swap;
    cfg.h2d_bandwidth = preset->h2d_bandwidth;
    cfg.d2h_bandwidth = preset->d2h_bandwidth;
    char err[512];
    cham_policy_t *pol;
    for (int rc = 0; rc < 2; rc++) {
        cfg.recompute = rc;
        err[0] = '\0';
        cham_status_t st = cham_plan_chameleon(prof, &cfg, &pol, err, sizeof err);
        if (st == CHAM_OK)
            check_policy(pol, true, "chameleon");
        else
            check_refusal(st, err, "chameleon");
    }
    cfg.recompute = false;
    err[0] = '\0';
    cham_status_t st = cham_plan_vdnn(prof, &cfg, &pol, err, sizeof err);
    if (st == CHAM_OK)
        check_policy(pol, false, "vdnn");
    else
        check_refusal(st, err, "vdnn");

    cham_swapadvisor_options_t so = cham_swapadvisor_options_default();
    so.population = 4;
    so.generations = pi->generations;
    so.threads = 1;
    so.seed = pi->seed;
    so.search_seconds = 2;       /* a bound: the generations end it first */
    cham_swapadvisor_result_t sr;
    err[0] = '\0';
    st = cham_plan_swapadvisor(prof, &cfg, &so, &pol, &sr, err, sizeof err);
    if (st == CHAM_OK) {
        if (sr.profile_order_ns == UINT64_MAX || sr.step_ns < sr.ideal_ns)
            fuzz_fail("swapadvisor's result contradicts itself", NULL);
        /* Its pool fits by its own model, where a tensor dies at its last
         * use; the profile's curve counts what the caller still holds, so
         * the policy's predicted peak may be over (docs/swapadvisor.md). */
        check_policy(pol, false, "swapadvisor");
        cham_swapadvisor_result_free(&sr);
    } else {
        check_refusal(st, err, "swapadvisor");
    }

    cham_hyperoffload_result_t hr;
    err[0] = '\0';
    st = cham_plan_hyperoffload(prof, &cfg, NULL, &pol, &hr, err, sizeof err);
    if (st == CHAM_OK) {
        cham_policy_view_t v;
        cham_policy_get(pol, &v);
        if (hr.refined.over_bytes > hr.inserted.over_bytes ||
            (hr.inserted.over_bytes == 0 && hr.refined.step_ns > hr.inserted.step_ns))
            fuzz_fail("hyperoffload's refinement made its placement worse", NULL);
        check_policy(pol, false, "hyperoffload");
    } else {
        check_refusal(st, err, "hyperoffload");
    }
    plan_protrain(prof, &cfg);
}

/* The peak of the profile's step: what the capacity is a share of. */
static uint64_t profile_peak(const cham_profile_t *prof)
{
    cham_profile_view_t v;
    cham_profile_get(prof, &v);
    size_t n = 2 * v.n_ops;
    uint64_t *actual = malloc((n ? n : 1) * sizeof *actual);
    uint64_t *curve = malloc((n ? n : 1) * sizeof *curve), peak = 0;
    if (!actual || !curve)
        fuzz_fail("out of host memory", NULL);
    cham_profile_memory_curve(prof, actual, curve);
    for (size_t i = 0; i < n; i++)
        peak = actual[i] > peak ? actual[i] : peak;
    free(actual);
    free(curve);
    return peak;
}

typedef struct peak_in {
    plan_in_t *plan;
    uint32_t share;              /* percent of the peak */
} peak_in_t;

static void with_profile(const cham_profile_t *prof, void *user)
{
    peak_in_t *pk = user;
    uint64_t peak = profile_peak(prof);
    uint64_t cap = peak / 100 * pk->share;
    pk->plan->capacity = cap > (UINT64_C(1) << 20) ? cap : UINT64_C(1) << 20;
    plan_all(prof, pk->plan);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (policy_out.path[0] == '\0')
        fuzz_memfile_open(&policy_out, "policy-out");
    input_t in = {.p = data, .n = size};
    prog_t p;
    gen(&in, &p);
    static const uint64_t min_swaps[] = {0, 4096, 16384, 1 << 20};
    plan_in_t pi = {.reserve = pick(&in, 2) ? UINT64_MAX : 0,
                    .min_swap = min_swaps[pick(&in, 4)],
                    .generations = pick(&in, 4),
                    .seed = pick(&in, 256)};
    peak_in_t pk = {.plan = &pi, .share = 20 + pick(&in, 131)};

    /* The profile, from an unconstrained step (the third: after warm-up). */
    cham_config_t c = cham_config_default();
    c.executor = false;
    run(&p, &c, 3, with_profile, &pk);

    /* Each runtime planner at that capacity, as a framework runs it. */
    static const cham_planner_kind_t kinds[] = {
        CHAM_PLANNER_CHAMELEON, CHAM_PLANNER_VDNN, CHAM_PLANNER_CAPUCHIN,
        CHAM_PLANNER_SWAPADVISOR, CHAM_PLANNER_HYPEROFFLOAD,
    };
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        c = cham_config_default();
        c.device.capacity = pi.capacity;
        c.device.hazard_check = true;
        c.planner = kinds[k];
        c.warmup_steps = 1;
        c.genpolicy_steps = 2;
        c.min_swap_bytes = pi.min_swap;
        c.recompute = pick(&in, 2);
        c.swapadvisor.population = 4;
        c.swapadvisor.generations = pi.generations;
        c.swapadvisor.threads = 1;
        c.swapadvisor.search_seconds = 2;
        run(&p, &c, 7, NULL, NULL);
    }
    return 0;
}
