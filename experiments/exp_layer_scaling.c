/* layer-scaling (paper Table 3): for each of the paper's three set-ups, the
 * step time of two layer counts that fit (native), extrapolated linearly to
 * a layer count that does not, against Chameleon's simulated time at that
 * count. The paper finds -2.32%, -0.18% and -0.41%. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "experiment.h"

typedef struct setup {
    uint32_t tp, pp, dp, seq, hidden, ffn, heads, mbs, gbs;
    uint32_t layers[3];          /* two that fit, one that does not */
} setup_t;

/* The paper's rows (8 NPUs each). Its second set-up prints layers 4 for
 * all three rows and 4, 6, 11 in the next column; we read 4, 6, 11 as the
 * layer counts (the experiment varies layers) and 4 as the micro-batch. */
static const setup_t paper[] = {
    {1, 2, 4, 4096, 4096, 11008, 32, 1, 32, {20, 28, 42}},
    {4, 1, 2, 16384, 5120, 20480, 32, 4, 8, {4, 6, 11}},
    {4, 2, 1, 16384, 8192, 32768, 32, 2, 8, {6, 8, 12}},
};
static const double paper_impact[] = {-2.32, -0.18, -0.41};

static cham_model_config_t model_of(const setup_t *s, uint32_t layers)
{
    cham_model_config_t m = exp_llama(s->hidden, layers, s->seq, s->mbs);
    m.ffn = s->ffn;
    m.heads = m.kv_heads = s->heads;
    m.tp = s->tp;
    m.pp = s->pp;
    m.dp = s->dp;
    m.gbs = s->gbs;
    m.zero = s->dp > 1 ? 2 : 0;          /* the paper runs DeepSpeed with ZeRO-2 */
    return m;
}

static cham_status_t run(const exp_config_t *c, exp_result_t *r, char *err, size_t err_size)
{
    const char *cols[] = {"setup", "layers (fit)", "s/step (fit)", "layers (big)",
                          "extrapolated s/step", "chameleon s/step", "impact %",
                          "paper impact %", "native at big"};
    exp_table_t *t = exp_result_table(r, "layer-scaling",
                                      "Linear extrapolation against Chameleon "
                                      "(simulated)",
                                      9, cols);
    if (!t)
        return CHAM_ERR_HOST_OOM;
    plot_t *pl = exp_result_plot(r, "layer-scaling",
                                     "Step time against layers: measured, extrapolated, "
                                     "Chameleon",
                                     "layers", "simulated s/step");
    if (!pl)
        return CHAM_ERR_HOST_OOM;
    uint64_t capacity = 0;               /* the device's (it takes a second: no reduced size) */
    char text[256] = "";
    for (size_t i = 0; i < sizeof paper / sizeof paper[0]; i++) {
        const setup_t *s = &paper[i];
        double t_fit[2];
        cham_run_result_t res;
        for (int k = 0; k < 2; k++) {
            cham_model_config_t m = model_of(s, s->layers[k]);
            cham_status_t st = exp_run(c, &m, CHAM_STRATEGY_NATIVE, capacity, 0, &res, err, err_size);
            if (st != CHAM_OK)
                return st;
            if (res.status != CHAM_OK) {
                snprintf(err, err_size, "layer-scaling: set-up %zu, %u layers do not fit "
                         "natively: %s", i + 1, s->layers[k], res.error);
                return res.status;
            }
            t_fit[k] = res.step_time_s;
        }
        uint32_t big = s->layers[2];
        double slope = (t_fit[1] - t_fit[0]) / (double)(s->layers[1] - s->layers[0]);
        double predicted = t_fit[1] + slope * (double)(big - s->layers[1]);
        cham_model_config_t m = model_of(s, big);
        cham_run_result_t native, cham;
        cham_status_t st = exp_run(c, &m, CHAM_STRATEGY_NATIVE, capacity, 2, &native, err, err_size);
        if (st == CHAM_OK)
            st = exp_run(c, &m, CHAM_STRATEGY_CHAMELEON, capacity, 0, &cham, err, err_size);
        if (st != CHAM_OK)
            return st;
        double measured = cham.status == CHAM_OK ? cham.step_time_s : NAN;
        double impact = 100.0 * (predicted / measured - 1);
        long row = exp_table_add_row(t);
        if (row < 0)
            return CHAM_ERR_HOST_OOM;
        exp_table_set_text(t, (size_t)row, 0, "%zu", i + 1);
        exp_table_set_text(t, (size_t)row, 1, "%u, %u", s->layers[0], s->layers[1]);
        exp_table_set_text(t, (size_t)row, 2, "%.3f, %.3f", t_fit[0], t_fit[1]);
        exp_table_set(t, (size_t)row, 3, big);
        exp_table_set(t, (size_t)row, 4, predicted);
        exp_table_set(t, (size_t)row, 5, measured);
        exp_table_set(t, (size_t)row, 6, impact);
        exp_table_set(t, (size_t)row, 7, paper_impact[i]);
        exp_table_set_text(t, (size_t)row, 8, "%s", native.status == CHAM_OK ? "fits" : "OOM");
        char series[40];
        snprintf(series, sizeof series, "set-up %zu", i + 1);
        plot_add(pl, series, s->layers[0], t_fit[0]);
        plot_add(pl, series, s->layers[1], t_fit[1]);
        plot_add(pl, series, big, measured);
        size_t len = strlen(text);
        snprintf(text + len, sizeof text - len, "%s%+.2f%%", len ? ", " : "", impact);
    }
    snprintf(r->summary, sizeof r->summary, "Chameleon's step time at the layer count that "
             "does not fit, against linear extrapolation from two that do: %s (a negative "
             "figure: slower than extrapolated; the paper: -2.32%%, -0.18%%, -0.41%%).", text);
    return CHAM_OK;
}

const exp_def_t exp_layer_scaling = {
    .name = "layer-scaling",
    .what = "extrapolated against Chameleon's step time for layers that do not fit (Table 3)",
    .device = "ascend-910b",
    .run = run,
};
