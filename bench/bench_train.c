/* bench_train: the GPT trainer (examples/gpt) under a memory budget.
 *
 * For two presets and budgets of 50% and 25% of the unconstrained peak, a
 * verified run of the default model (every dynamic behaviour on): the
 * simulated step time against the unconstrained copy's (overhead versus
 * ideal, virtual time of the preset), and the host overhead: CPU time inside
 * Chameleon's calls over the run's CPU time (measured on this machine).
 *
 * Usage: bench_train [--steps N] (default 100) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "lib/machine.h"
#include "train.h"

int main(int argc, char **argv)
{
    bench_output_by_line();
    int steps = 100;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            steps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_train [--steps N]\n");
            return 2;
        }
    }
    if (steps < 1)
        steps = 1;
    gpt_data_t data;
    if (gpt_data_synthetic(&data, 200000, 64, 1) != 0) {
        fprintf(stderr, "bench_train: out of host memory\n");
        return 1;
    }
    static const char *const presets[] = {"a100-80g", "ascend-910b"};
    static const double budgets[] = {0.5, 0.25};
    char cpu[128];
    bench_cpu_model(cpu, sizeof cpu);
    printf("GPT trainer, default model, %d verified steps (simulated step times; host "
           "overhead measured on %s)\n\n", steps, cpu);
    printf("%-12s %7s %12s %12s %10s %9s %10s %9s %9s\n", "preset", "budget", "step ms",
           "ideal ms", "overhead", "policies", "on-demand", "host", "exact");
    int rc = 0;
    double worst_host = 0;
    for (size_t p = 0; p < 2; p++) {
        for (size_t b = 0; b < 2; b++) {
            gpt_train_config_t c = gpt_train_config_default();
            c.steps = steps;
            c.preset = presets[p];
            c.budget_fraction = budgets[b];
            c.verify = true;
            static const uint64_t overflow_at[] = {30, 70};
            c.overflow_at = overflow_at;
            c.n_overflow_at = 2;
            gpt_train_result_t r;
            char err[600];
            if (gpt_train(&c, &data, NULL, NULL, &r, err, sizeof err) != CHAM_OK) {
                printf("%-12s %6.0f%%  failed: %s\n", presets[p], 100 * budgets[b], err);
                rc = 1;
                continue;
            }
            printf("%-12s %6.0f%% %12.3f %12.3f %+9.1f%% %9llu %10llu %8.2f%% %9s\n",
                   presets[p], 100 * budgets[b], r.sim_step_time_s * 1e3,
                   r.ideal_step_time_s * 1e3, 100 * r.overhead_vs_ideal,
                   (unsigned long long)r.policy_regenerations,
                   (unsigned long long)r.on_demand_swapins, 100 * r.host_overhead_ratio,
                   r.bit_exact ? "yes" : "NO");
            if (r.host_overhead_ratio > worst_host)
                worst_host = r.host_overhead_ratio;
        }
    }
    printf("\nhost overhead target: under 1%% of the CPU time in every row: %s (worst %.2f%%)\n",
           bench_verdict(worst_host < 0.01), 100 * worst_host);
    gpt_data_free(&data);
    return rc;
}
