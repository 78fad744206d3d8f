/* `chameleon devices`: the simulated device presets and their figures, and
 * whether a real accelerator can be opened through the cuda backend. */
#include <stdio.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "args.h"
#include "commands.h"

static void list_presets(void)
{
    printf("%-12s %9s %11s %10s %9s %9s %9s %20s %9s  %s\n", "preset", "memory", "fp16 dense",
           "HBM", "H2D", "D2H", "P2P", "host share", "reached", "device");
    for (size_t i = 0; i < cham_preset_count(); i++) {
        const cham_preset_t *p = cham_preset_at(i);
        char host[32] = "none";
        if (p->host_flops > 0)
            snprintf(host, sizeof host, "%.2f TF/s %3.0f GB/s", p->host_flops / 1e12,
                     p->host_mem_bandwidth / 1e9);
        printf("%-12s %5.0f GiB %6.0f TF/s %6.0f GB/s %4.0f GB/s %4.0f GB/s %4.0f GB/s %20s "
               "%3.0f%% %3.0f%%  %s%s\n",
               p->name, (double)p->capacity / (1u << 30), p->peak_flops / 1e12,
               p->hbm_bandwidth / 1e9, p->h2d_bandwidth / 1e9, p->d2h_bandwidth / 1e9,
               p->p2p_bandwidth / 1e9, host, 100 * p->flops_efficiency,
               100 * p->hbm_efficiency, p->description,
               strcmp(p->name, cham_preset_default_name()) == 0 ? " (default)" : "");
    }
    printf("\nreached: the fractions of the FLOP/s and HBM peaks training's kernels reach,\n"
           "fit to published runs (docs/fidelity.md). Figures and sources: docs/devices.md\n");
}

/* Opens the real device and prints what it is, or why it cannot be used. */
static int probe_cuda(void)
{
    cham_device_config_t c = cham_device_config_default();
    c.backend = "cuda";
    cham_device_t *dev;
    cham_status_t st = cham_device_open(&c, &dev);
    if (st != CHAM_OK) {
        printf("cuda: unavailable (%s): %s\n", cham_status_string(st),
               cham_device_last_error(NULL));
        return 1;
    }
    cham_device_info_t info;
    cham_device_get_info(dev, &info);
    printf("cuda: %s, %.1f GiB\n", info.name, (double)info.capacity / (1u << 30));
    cham_device_close(dev);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: chameleon devices [--backend sim|cuda]\n"
               "Lists the sim presets; with --backend cuda, opens the real device\n"
               "and says what it is or why it cannot be used (exit 1).\n");
}

int cmd_devices(int argc, char **argv)
{
    static const tool_opt_t opts[] = {{"--backend", true, NULL}};
    if (tool_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    bool cuda = false;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (!tool_find_opt("devices", opts, 1, argc, argv, &i, &v))
            return 2;
        if (strcmp(v, "sim") != 0 && strcmp(v, "cuda") != 0)
            return tool_bad_value("devices", "--backend", "sim or cuda", v);
        cuda = strcmp(v, "cuda") == 0;
    }
    if (tool_parse_only)
        return 0;
    if (cuda)
        return probe_cuda();
    list_presets();
    return 0;
}
