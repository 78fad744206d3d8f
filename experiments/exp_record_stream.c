/* record-stream (paper Fig. 8): Chameleon's custom recordStream (a
 * swapped-out block is reused after the op the policy names, behind an
 * event wait) against PyTorch's (reused when a host query finds the copy
 * done) while the model grows by layers: step time and the memory block
 * reuse interval, mean and max. */
#include <stdio.h>

#include "experiment.h"

static cham_status_t run(const exp_config_t *c, exp_result_t *r, char *err, size_t err_size)
{
    /* One device, no collectives: their record_stream frees would count in
     * the reuse interval too. From where swapping starts to the largest
     * that runs (max-size). */
    const uint32_t full[] = {11, 13, 15, 17, 19}, small[] = {3, 4, 5, 6};
    const uint32_t *layers = c->reduced ? small : full;
    size_t n = c->reduced ? 4 : 5;
    const char *cols[] = {"layers", "custom s/step", "pytorch s/step", "custom reuse mean",
                          "pytorch reuse mean", "custom reuse max", "pytorch reuse max"};
    exp_table_t *t = exp_result_table(r, "record-stream",
                                      "Custom against PyTorch's recordStream (simulated; "
                                      "reuse intervals in ops)",
                                      7, cols);
    if (!t)
        return CHAM_ERR_HOST_OOM;
    plot_t *time = exp_result_plot(r, "record-stream-time",
                                       "Step time, custom and PyTorch "
                                       "recordStream",
                                       "layers", "simulated s/step");
    plot_t *reuse = exp_result_plot(r, "record-stream-reuse",
                                        "Mean memory block reuse "
                                        "interval",
                                        "layers", "ops from free to reuse");
    if (!time || !reuse)
        return CHAM_ERR_HOST_OOM;
    double ratio_sum = 0;
    size_t ratio_n = 0;
    for (size_t i = 0; i < n; i++) {
        cham_run_config_t rc = cham_run_config_default();
        rc.plan_optimizer = false;      /* the optimizer where the row says */
        rc.model = c->reduced ? exp_llama(1024, layers[i], 1024, 8)
                              : exp_llama(4096, layers[i], 4096, 4);
        rc.steps = EXP_STABLE_STEPS;
        rc.runtime.device.capacity = c->reduced ? 3ull << 30 : 0;
        long row = exp_table_add_row(t);
        if (row < 0)
            return CHAM_ERR_HOST_OOM;
        exp_table_set_text(t, (size_t)row, 0, "%u", layers[i]);
        double mean[2] = {0, 0};
        for (int pt = 0; pt < 2; pt++) {
            rc.runtime.pytorch_record_stream = pt;
            exp_steps_t s;
            cham_run_result_t res;
            cham_status_t st = exp_run_steps(c, &rc, &s, &res, err, err_size);
            exp_steps_free(&s);
            if (st != CHAM_OK)
                return st;
            if (res.status != CHAM_OK) {
                snprintf(err, err_size, "record-stream: %u layers, %s: %s", layers[i],
                         pt ? "pytorch" : "custom", res.error);
                return res.status;
            }
            exp_table_set(t, (size_t)row, 1 + pt, res.step_time_s);
            exp_table_set(t, (size_t)row, 3 + pt, res.reuse_interval_mean);
            exp_table_set(t, (size_t)row, 5 + pt, (double)res.reuse_interval_max);
            plot_add(time, pt ? "pytorch" : "custom", layers[i], res.step_time_s);
            plot_add(reuse, pt ? "pytorch" : "custom", layers[i], res.reuse_interval_mean);
            mean[pt] = res.reuse_interval_mean;
        }
        if (mean[0] > 0) {
            ratio_sum += mean[1] / mean[0];
            ratio_n++;
        }
    }
    snprintf(r->summary, sizeof r->summary, "PyTorch's recordStream holds a swapped-out block "
             "%.1fx as many ops on average as the custom one.",
             ratio_n ? ratio_sum / (double)ratio_n : 0);
    return CHAM_OK;
}

const exp_def_t exp_record_stream = {
    .name = "record-stream",
    .what = "custom against PyTorch recordStream as layers grow (Fig. 8)",
    .device = "ascend-910b",
    .run = run,
};
