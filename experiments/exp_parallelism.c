/* parallelism (paper Table 2): the same model on the same devices, first
 * with high tensor or pipeline parallelism or full recomputation (what
 * makes it fit without Chameleon), then with lower TP/PP (more data
 * parallelism) or no recomputation and Chameleon; the speed-up. Step times
 * are one device's (the first pipeline stage), simulated. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "experiment.h"

typedef struct cfg {
    uint32_t tp, pp, dp;
    bool recompute;
} cfg_t;

typedef struct row {
    const char *model;           /* preset */
    uint32_t devices, seq, hidden, ffn, heads, layers, mbs, gbs;
    cfg_t base, ours;
    double paper_s_base, paper_s_ours, paper_gain;
} row_t;

/* The paper's pairs (every row of its Table 2). */
static const row_t rows[] = {
    {"llama2-7b", 8, 8192, 4096, 11008, 32, 32, 1, 16, {8, 1, 1, 0}, {1, 1, 8, 0}, 6.83, 5.42, 25.63},
    {"llama2-7b", 8, 4096, 5120, 13824, 40, 40, 1, 16, {8, 1, 1, 0}, {2, 1, 4, 0}, 6.30, 5.88, 7.14},
    {"llama2-7b", 8, 4096, 4096, 11008, 32, 32, 1, 16, {1, 2, 4, 0}, {1, 1, 8, 0}, 3.20, 3.02, 5.96},
    {"llama2-7b", 32, 4096, 4096, 11008, 32, 32, 1, 64, {1, 2, 16, 0}, {1, 1, 32, 0}, 2.53, 2.34, 8.06},
    {"llama2-7b", 8, 16384, 4096, 11008, 32, 14, 1, 8, {1, 2, 4, 0}, {1, 1, 8, 0}, 4.46, 3.21, 38.94},
    {"llama2-7b", 8, 16384, 5120, 13824, 40, 40, 1, 8, {4, 1, 2, 1}, {4, 1, 2, 0}, 18.19, 14.13, 28.73},
    {"llama3-8b", 4, 8192, 4096, 14336, 32, 32, 2, 8, {4, 1, 1, 1}, {4, 1, 1, 0}, 9.41, 7.31, 28.73},
    {"mixtral-8x7b", 4, 16384, 4096, 14336, 32, 36, 1, 4, {4, 1, 1, 1}, {4, 1, 1, 0}, 11.79, 9.06, 30.13},
};

static cham_model_config_t model_of(const row_t *r, const cfg_t *p)
{
    cham_model_config_t m;
    cham_model_preset(r->model, &m);
    m.seq = r->seq;
    m.hidden = r->hidden;
    m.ffn = r->ffn;
    m.heads = r->heads;
    if (m.kv_heads > m.heads || m.heads % m.kv_heads)
        m.kv_heads = m.heads;
    m.layers = r->layers;
    m.mbs = r->mbs;
    m.gbs = r->gbs;
    m.tp = p->tp;
    m.pp = p->pp;
    m.dp = p->dp;
    m.zero = p->dp > 1 ? 2 : 0;          /* the paper runs DeepSpeed with ZeRO-2 */
    m.recompute = p->recompute;
    return m;
}

static void describe(char *buf, size_t size, const cfg_t *p)
{
    snprintf(buf, size, "TP%u PP%u DP%u%s", p->tp, p->pp, p->dp, p->recompute ? " recomp" : "");
}

static cham_status_t run(const exp_config_t *c, exp_result_t *r, char *err, size_t err_size)
{
    const char *cols[] = {"row", "model", "baseline", "with chameleon", "baseline s/step",
                          "chameleon s/step", "gain %", "paper gain %", "baseline"};
    exp_table_t *t = exp_result_table(r, "parallelism",
                                      "Less TP/PP or no recomputation, with Chameleon "
                                      "(simulated, one device)",
                                      9, cols);
    if (!t)
        return CHAM_ERR_HOST_OOM;
    plot_t *pl = exp_result_plot(r, "parallelism", "Speed-up per row: ours against the paper's",
                                     "row", "gain %");
    if (!pl)
        return CHAM_ERR_HOST_OOM;
    size_t n = c->reduced ? 3 : sizeof rows / sizeof rows[0];
    for (size_t i = 0; i < n; i++) {
        char label[24];
        snprintf(label, sizeof label, "%zu", i + 1);
        plot_category(pl, label);
    }
    double sum = 0;
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        const row_t *w = &rows[i];
        cham_model_config_t mb = model_of(w, &w->base), mo = model_of(w, &w->ours);
        if (c->reduced) {                 /* a quarter of the tokens and layers */
            mb.seq /= 4, mo.seq /= 4;
            mb.layers /= 4, mo.layers /= 4;
            mb.layers -= mb.layers % mb.pp, mo.layers -= mo.layers % mo.pp;
        }
        cham_run_result_t rb, ro;
        cham_status_t st = exp_run(c, &mb, CHAM_STRATEGY_NATIVE, 0, 0, &rb, err, err_size);
        if (st == CHAM_OK)
            st = exp_run(c, &mo, CHAM_STRATEGY_CHAMELEON, 0, 0, &ro, err, err_size);
        if (st != CHAM_OK)
            return st;
        long row = exp_table_add_row(t);
        if (row < 0)
            return CHAM_ERR_HOST_OOM;
        char a[40], b[40];
        describe(a, sizeof a, &w->base);
        describe(b, sizeof b, &w->ours);
        double tb = rb.status == CHAM_OK ? rb.step_time_s : NAN;
        double to = ro.status == CHAM_OK ? ro.step_time_s : NAN;
        double gain = 100.0 * (tb / to - 1);
        exp_table_set_text(t, (size_t)row, 0, "%zu", i + 1);
        exp_table_set_text(t, (size_t)row, 1, "%s", w->model);
        exp_table_set_text(t, (size_t)row, 2, "%s", a);
        exp_table_set_text(t, (size_t)row, 3, "%s", b);
        exp_table_set(t, (size_t)row, 4, tb);
        exp_table_set(t, (size_t)row, 5, to);
        exp_table_set(t, (size_t)row, 6, gain);
        exp_table_set(t, (size_t)row, 7, w->paper_gain);
        exp_table_set_text(t, (size_t)row, 8, "%s",
                           rb.status == CHAM_OK ? "fits" : cham_status_string(rb.status));
        plot_add(pl, "ours", (double)i + 1, gain);
        plot_add(pl, "paper", (double)i + 1, w->paper_gain);
        if (!isnan(gain)) {
            sum += gain;
            count++;
        }
    }
    snprintf(r->summary, sizeof r->summary, "Mean gain over %d rows: %.1f%% (the paper's "
             "rows: 5.96%% to 38.94%%).", count, count ? sum / count : NAN);
    return CHAM_OK;
}

const exp_def_t exp_parallelism = {
    .name = "parallelism",
    .what = "less TP/PP or no recomputation with Chameleon against without (Table 2)",
    .device = "ascend-910b",
    .run = run,
};
