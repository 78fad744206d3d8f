/* scaling (paper Fig. 6): step time against batch size, sequence length and
 * hidden size for native (until it fails), full recomputation and
 * Chameleon, from Llama 2's shape at batch 4, 5 layers, sequence 4096,
 * hidden 4096; Chameleon's improvement over recomputation at each point
 * and on average. */
#include <math.h>
#include <stdio.h>

#include "experiment.h"

typedef struct sweep {
    const char *name;
    uint32_t values[8];
    size_t n;
} sweep_t;

static cham_model_config_t point(size_t d, uint32_t v, bool reduced)
{
    uint32_t b = 4, l = 5, s = reduced ? 1024 : 4096, h = reduced ? 1024 : 4096;
    if (d == 0)
        b = v;
    else if (d == 1)
        s = v;
    else
        h = v;
    return exp_llama(h, l, s, b);
}

static cham_status_t run(const exp_config_t *c, exp_result_t *r, char *err, size_t err_size)
{
    const sweep_t full[] = {
        {"batch", {1, 2, 4, 8, 12, 16, 20}, 7},
        {"seq", {2048, 4096, 8192, 12288, 16384, 20480}, 6},
        {"hidden", {2048, 3072, 4096, 4608, 5120, 5632}, 6},
    };
    const sweep_t small[] = {
        {"batch", {1, 4, 8, 16}, 4},
        {"seq", {512, 1024, 2048, 4096}, 4},
        {"hidden", {512, 1024, 1536, 2048}, 4},
    };
    const sweep_t *sw = c->reduced ? small : full;
    uint64_t capacity = c->reduced ? 4ull << 30 : 0;
    const char *cols[] = {"point", "dimension", "value", "native s", "recompute s",
                          "chameleon s", "improvement over recompute %"};
    exp_table_t *t =
        exp_result_table(r, "scaling", "Step time against model size (simulated s/step)", 7, cols);
    if (!t)
        return CHAM_ERR_HOST_OOM;
    const cham_strategy_t pol[] = {CHAM_STRATEGY_NATIVE, CHAM_STRATEGY_RECOMPUTE, CHAM_STRATEGY_CHAMELEON};
    double sum[3] = {0};
    int count[3] = {0};
    for (size_t d = 0; d < 3; d++) {
        char name[48], title[96];
        snprintf(name, sizeof name, "scaling-%s", sw[d].name);
        snprintf(title, sizeof title, "Step time against %s", sw[d].name);
        plot_t *pl = exp_result_plot(r, name, title, sw[d].name, "simulated s/step");
        if (!pl)
            return CHAM_ERR_HOST_OOM;
        bool native_alive = true;
        for (size_t i = 0; i < sw[d].n; i++) {
            long row = exp_table_add_row(t);
            if (row < 0)
                return CHAM_ERR_HOST_OOM;
            exp_table_set_text(t, (size_t)row, 0, "%s=%u", sw[d].name, sw[d].values[i]);
            exp_table_set_text(t, (size_t)row, 1, "%s", sw[d].name);
            exp_table_set(t, (size_t)row, 2, sw[d].values[i]);
            double time[3] = {NAN, NAN, NAN};
            cham_model_config_t m = point(d, sw[d].values[i], c->reduced);
            for (size_t k = 0; k < 3; k++) {
                if (pol[k] == CHAM_STRATEGY_NATIVE && !native_alive)
                    continue;                 /* it failed at a smaller size */
                cham_run_result_t res;
                cham_status_t st = exp_run(c, &m, pol[k], capacity, 0, &res, err, err_size);
                if (st != CHAM_OK)
                    return st;
                if (res.status == CHAM_OK)
                    time[k] = res.step_time_s;
                else if (pol[k] == CHAM_STRATEGY_NATIVE)
                    native_alive = false;
                exp_table_set(t, (size_t)row, 3 + k, time[k]);
                plot_add(pl, cham_strategy_name(pol[k]), sw[d].values[i], time[k]);
            }
            if (!isnan(time[1]) && !isnan(time[2])) {
                double gain = 100.0 * (time[1] / time[2] - 1);
                exp_table_set(t, (size_t)row, 6, gain);
                sum[d] += gain;
                count[d]++;
            }
        }
    }
    snprintf(r->summary, sizeof r->summary, "Chameleon's average improvement over full "
             "recomputation: %.1f%% (batch), %.1f%% (sequence), %.1f%% (hidden); the paper "
             "reports 18.78%%, 16.69%% and 19.32%%.",
             count[0] ? sum[0] / count[0] : NAN, count[1] ? sum[1] / count[1] : NAN,
             count[2] ? sum[2] / count[2] : NAN);
    return CHAM_OK;
}

const exp_def_t exp_scaling = {
    .name = "scaling",
    .what = "step time against batch, sequence, hidden: native, recompute, chameleon (Fig. 6)",
    .device = "ascend-910b",
    .run = run,
};
