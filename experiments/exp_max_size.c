/* max-size (paper Table 4): from Llama 2's shape at batch 4, 5 layers,
 * sequence 4096, hidden 4096 on one device, grow one dimension at a time
 * until the run fails (out of memory, a policy that no longer fits), for
 * each strategy; report the largest size, its ratio to native, and the step
 * time against ideal at that size. */
#include <math.h>
#include <string.h>

#include "experiment.h"

typedef struct dim {
    const char *name;
    uint32_t base, unit;         /* sizes are base + k * unit, k >= 0 */
} dim_t;

static const dim_t dims[] = {
    {"batch", 4, 1}, {"layers", 5, 1}, {"seq", 4096, 512}, {"hidden", 4096, 128},
};

static const cham_strategy_t strategies[] = {CHAM_STRATEGY_NATIVE, CHAM_STRATEGY_RECOMPUTE, CHAM_STRATEGY_VDNN,
                                             CHAM_STRATEGY_CAPUCHIN, CHAM_STRATEGY_CHAMELEON};
#define N_STRATEGIES (sizeof strategies / sizeof strategies[0])

typedef struct setup {
    uint32_t batch, layers, seq, hidden;
    uint64_t capacity;           /* 0: the preset's */
} setup_t;

static cham_model_config_t model_of(const setup_t *s, size_t d, uint32_t v)
{
    setup_t x = *s;
    uint32_t *field[] = {&x.batch, &x.layers, &x.seq, &x.hidden};
    *field[d] = v;
    return exp_llama(x.hidden, x.layers, x.seq, x.batch);
}

/* One probe of exp_largest: the strategy on dimension d at k units. */
typedef struct probe {
    const exp_config_t *c;
    const setup_t *s;
    size_t d;
    cham_strategy_t p;
} probe_t;

static uint32_t base_of(const setup_t *s, size_t d)
{
    return d == 0 ? s->batch : d == 1 ? s->layers : d == 2 ? s->seq : s->hidden;
}

static cham_status_t fits(void *user, uint32_t k, bool *ok, double *step_s, char *err,
                          size_t err_size)
{
    const probe_t *q = user;
    cham_model_config_t m = model_of(q->s, q->d, base_of(q->s, q->d) + k * dims[q->d].unit);
    cham_run_result_t r;
    cham_status_t st = exp_run(q->c, &m, q->p, q->s->capacity, 0, &r, err, err_size);
    *ok = st == CHAM_OK && r.status == CHAM_OK;
    *step_s = r.step_time_s;
    return st;
}

/* The largest size that runs, 0 when even the base fails. */
static cham_status_t largest(const exp_config_t *c, const setup_t *s, size_t d,
                             cham_strategy_t p, uint32_t limit_k, uint32_t *out,
                             double *step_s, char *err, size_t err_size)
{
    probe_t q = {c, s, d, p};
    int64_t k;
    cham_status_t st = exp_largest(fits, &q, limit_k, &k, step_s, err, err_size);
    *out = k < 0 ? 0 : base_of(s, d) + (uint32_t)k * dims[d].unit;
    return st;
}

static cham_status_t run(const exp_config_t *c, exp_result_t *r, char *err, size_t err_size)
{
    /* Reduced: a quarter of the sizes on a quarter of the memory. */
    setup_t s = c->reduced ? (setup_t){4, 5, 1024, 1024, 4ull << 30}
                           : (setup_t){4, 5, 4096, 4096, 0};
    uint32_t limit_k = c->reduced ? 64 : 256;
    const char *cols[] = {"dimension", "base", "native", "recompute", "vdnn", "capuchin",
                          "chameleon", "chameleon / native", "chameleon vs ideal %"};
    exp_table_t *t = exp_result_table(r, "max-size",
                                      "Largest size per dimension before failure "
                                      "(simulated)",
                                      9, cols);
    if (!t)
        return CHAM_ERR_HOST_OOM;
    plot_t *pl = exp_result_plot(r, "max-size",
                                     "Largest size relative to native, per dimension",
                                     "dimension", "largest size / native's");
    if (!pl)
        return CHAM_ERR_HOST_OOM;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        plot_category(pl, dims[d].name);
    char best[256] = "";
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        long row = exp_table_add_row(t);
        if (row < 0)
            return CHAM_ERR_HOST_OOM;
        exp_table_set_text(t, (size_t)row, 0, "%s", dims[d].name);
        exp_table_set(t, (size_t)row, 1, d == 0 ? s.batch : d == 1 ? s.layers
                                         : d == 2 ? s.seq : s.hidden);
        uint32_t native = 0;
        for (size_t k = 0; k < N_STRATEGIES; k++) {
            uint32_t v;
            double step_s;
            cham_status_t st = largest(c, &s, d, strategies[k], limit_k, &v, &step_s, err,
                                       err_size);
            if (st != CHAM_OK)
                return st;
            exp_table_set(t, (size_t)row, 2 + k, v);
            if (strategies[k] == CHAM_STRATEGY_NATIVE)
                native = v;
            if (native)
                plot_add(pl, cham_strategy_name(strategies[k]), (double)d + 1,
                             (double)v / native);
            if (strategies[k] != CHAM_STRATEGY_CHAMELEON || !v)
                continue;
            exp_table_set(t, (size_t)row, 7, native ? (double)v / native : NAN);
            cham_model_config_t m = model_of(&s, d, v);
            cham_run_result_t ideal;
            if ((st = exp_run(c, &m, CHAM_STRATEGY_IDEAL, 0, 0, &ideal, err, err_size)) != CHAM_OK)
                return st;
            exp_table_set(t, (size_t)row, 8, 100.0 * (step_s / ideal.step_time_s - 1));
            size_t len = strlen(best);
            snprintf(best + len, sizeof best - len, "%s%s %.2fx", len ? ", " : "",
                     dims[d].name, native ? (double)v / native : 0.0);
        }
    }
    snprintf(r->summary, sizeof r->summary, "Chameleon's largest size against native: %s.",
             best);
    return CHAM_OK;
}

const exp_def_t exp_max_size = {
    .name = "max-size",
    .what = "largest batch, layers, sequence, hidden per strategy (Table 4)",
    .device = "ascend-910b",
    .run = run,
};
