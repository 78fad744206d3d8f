/* model-size (issue 18; ProTrain's Table 2): the largest Llama-shaped
 * model one device trains with 2 TiB of host memory, growing the layers
 * (hidden 4096), then the hidden size (32 layers), at sequence 1024 and
 * micro-batch 1 as ProTrain measures; on the 64 GiB Ascend 910B and the
 * 80 GiB A100 whatever --device says. For native, ZeRO-3 offload with
 * full checkpointing (zero-offload: every chunk on the host, no
 * planning), ProTrain's planned runtime, and Chameleon with the optimizer
 * on the device and on the host (device_groups auto: the first groups
 * updated on the device, as many as ProTrain's cost model keeps there);
 * the step time of each at its largest, and ProTrain's and Chameleon's at
 * ProTrain's largest. Four searches, one per row of the table (device
 * by dimension): c->part picks one, so the tests run them as four CTest
 * tests that `ctest -j` spreads over the cores. */
#include <math.h>
#include <string.h>

#include "experiment.h"

typedef struct dim {
    const char *name;
    uint32_t base, unit;         /* sizes are base + k * unit */
} dim_t;

/* A strategy and where its optimizer runs. */
typedef struct method {
    const char *name;
    cham_strategy_t strategy;
    bool host_optimizer;
    uint64_t steps;              /* enough to reach Stable where it matters */
} method_t;

static const method_t methods[] = {
    {"native", CHAM_STRATEGY_NATIVE, false, 3},
    {"zero-offload", CHAM_STRATEGY_ZERO_OFFLOAD, false, 3},
    {"protrain", CHAM_STRATEGY_PROTRAIN, false, 3},
    {"chameleon", CHAM_STRATEGY_CHAMELEON, false, EXP_STABLE_STEPS},
    {"chameleon+host", CHAM_STRATEGY_CHAMELEON, true, EXP_STABLE_STEPS},
};
#define N_METHODS (sizeof methods / sizeof methods[0])
enum { PROTRAIN = 2 };
enum { N_PARTS = 4 };            /* two devices by two dimensions */

typedef struct setup {
    uint32_t hidden, layers, seq;
    dim_t dims[2];               /* layers, then hidden */
    uint32_t limit_k;            /* at most this many units above the base */
    uint64_t capacity;           /* 0: the preset's */
} setup_t;

static cham_model_config_t model_of(const setup_t *s, size_t d, uint32_t v, bool host)
{
    cham_model_config_t m = d == 0 ? exp_llama(s->hidden, v, s->seq, 1)
                                   : exp_llama(v, s->layers, s->seq, 1);
    m.host_optimizer = host;
    m.device_groups = host ? CHAM_DEVICE_GROUPS_AUTO : 0;
    return m;
}

/* One run of method k on model dimension d at size v: *ok, and its step. */
static cham_status_t try_size(const exp_config_t *c, const setup_t *s, size_t d, uint32_t v,
                              size_t k, bool *ok, double *step_s, char *err, size_t err_size)
{
    cham_model_config_t m = model_of(s, d, v, methods[k].host_optimizer);
    cham_run_result_t r;
    cham_status_t st = exp_run(c, &m, methods[k].strategy, s->capacity, methods[k].steps, &r,
                               err, err_size);
    *ok = st == CHAM_OK && r.status == CHAM_OK;
    *step_s = *ok ? r.step_time_s : NAN;
    return st;
}

/* One probe of exp_largest: method k on dimension d at u units. */
typedef struct probe {
    const exp_config_t *c;
    const setup_t *s;
    size_t d, k;
} probe_t;

static cham_status_t fits(void *user, uint32_t u, bool *ok, double *step_s, char *err,
                          size_t err_size)
{
    const probe_t *q = user;
    const dim_t *dm = &q->s->dims[q->d];
    return try_size(q->c, q->s, q->d, dm->base + u * dm->unit, q->k, ok, step_s, err,
                    err_size);
}

/* The largest size that runs, 0 when even the base fails. */
static cham_status_t largest(const exp_config_t *c, const setup_t *s, size_t d, size_t k,
                             uint32_t *out, double *step_s, char *err, size_t err_size)
{
    probe_t q = {c, s, d, k};
    int64_t u;
    cham_status_t st = exp_largest(fits, &q, s->limit_k, &u, step_s, err, err_size);
    *out = u < 0 ? 0 : s->dims[d].base + (uint32_t)u * s->dims[d].unit;
    return st;
}

static cham_status_t run(const exp_config_t *c, exp_result_t *r, char *err, size_t err_size)
{
    if (c->part > N_PARTS) {
        snprintf(err, err_size, "model-size has parts 1 to %d (or 0 for all), not %u", N_PARTS,
                 c->part);
        return CHAM_ERR_INVALID_ARG;
    }
    /* Reduced: an eighth of the hidden size on 2 GiB, a few units. */
    setup_t s = c->reduced
                    ? (setup_t){512, 4, 512, {{"layers", 4, 4}, {"hidden", 512, 128}}, 24,
                                2ull << 30}
                    : (setup_t){4096, 32, 1024, {{"layers", 8, 32}, {"hidden", 4096, 1024}}, 100,
                                0};
    static const char *const devices[] = {"ascend-910b", "a100-80g"};
    const char *cols[] = {"device",         "dimension",        "native",
                          "zero-offload",   "protrain",         "chameleon",
                          "chameleon+host", "protrain step s",  "chameleon step s",
                          "chameleon+host step s", "chameleon at protrain's s",
                          "chameleon+host at protrain's s"};
    exp_table_t *t = exp_result_table(r, "model-size",
                                      "Largest Llama-shaped model per method, 2 TiB of host "
                                      "memory (simulated)",
                                      12, cols);
    if (!t)
        return CHAM_ERR_HOST_OOM;
    plot_t *pl = exp_result_plot(r, "model-size",
                                 "Largest model relative to native",
                                 "device and dimension", "largest size / native's");
    if (!pl)
        return CHAM_ERR_HOST_OOM;
    for (size_t dv = 0; dv < 2; dv++)          /* x 2 dv + d + 1, as the rows */
        for (size_t d = 0; d < 2; d++) {
            char label[sizeof pl->categories[0]];
            snprintf(label, sizeof label, "%s %s", devices[dv], s.dims[d].name);
            plot_category(pl, label);
        }
    char summary[sizeof r->summary] = "";
    for (size_t dv = 0; dv < 2; dv++) {
        exp_config_t dc = *c;
        dc.device = devices[dv];
        for (size_t d = 0; d < 2; d++) {
            /* Part 2 dv + d + 1 is this row of the whole experiment. */
            if (c->part && c->part != 2 * dv + d + 1)
                continue;
            long row = exp_table_add_row(t);
            if (row < 0)
                return CHAM_ERR_HOST_OOM;
            exp_table_set_text(t, (size_t)row, 0, "%s", devices[dv]);
            exp_table_set_text(t, (size_t)row, 1, "%s", s.dims[d].name);
            uint32_t size[N_METHODS];
            double step[N_METHODS];
            for (size_t k = 0; k < N_METHODS; k++) {
                cham_status_t st = largest(&dc, &s, d, k, &size[k], &step[k], err, err_size);
                if (st != CHAM_OK)
                    return st;
                exp_table_set(t, (size_t)row, 2 + k, size[k]);
            }
            for (size_t k = 0; size[0] && k < N_METHODS; k++)
                plot_add(pl, methods[k].name, (double)(2 * dv + d + 1),
                         (double)size[k] / size[0]);
            exp_table_set(t, (size_t)row, 7, step[PROTRAIN]);
            exp_table_set(t, (size_t)row, 8, step[3]);
            exp_table_set(t, (size_t)row, 9, step[4]);
            /* Both Chameleons at ProTrain's largest size. */
            double at[2] = {NAN, NAN};
            for (size_t k = 3; k < 5 && size[PROTRAIN]; k++) {
                bool ok;
                cham_status_t st = try_size(&dc, &s, d, size[PROTRAIN], k, &ok, &at[k - 3], err,
                                            err_size);
                if (st != CHAM_OK)
                    return st;
                exp_table_set(t, (size_t)row, 7 + k, at[k - 3]);
            }
            size_t len = strlen(summary);
            snprintf(summary + len, sizeof summary - len,
                     "%s %s: protrain %u, chameleon %u / %u (device / host optimizer); at "
                     "protrain's largest %.3g s against %.3g / %.3g s. ", devices[dv],
                     s.dims[d].name, size[PROTRAIN], size[3], size[4], step[PROTRAIN], at[0],
                     at[1]);
        }
    }
    snprintf(r->summary, sizeof r->summary, "%s", summary);
    return CHAM_OK;
}

const exp_def_t exp_model_size = {
    .name = "model-size",
    .what = "largest Llama-shaped model: native, zero-offload, protrain, chameleon (issue 18)",
    .device = "ascend-910b",
    .run = run,
};
