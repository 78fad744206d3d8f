/* `chameleon devices`: the simulated device presets and their figures, and
 * whether a real accelerator can be opened through the cuda backend. */
#include <stdio.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "commands.h"

static void list_presets(void)
{
    printf("%-12s %9s %11s %10s %9s %9s %9s  %s\n", "preset", "memory", "fp16 dense",
           "HBM", "H2D", "D2H", "P2P", "device");
    for (size_t i = 0; i < cham_preset_count(); i++) {
        const cham_preset_t *p = cham_preset_at(i);
        printf("%-12s %5.0f GiB %6.0f TF/s %6.0f GB/s %4.0f GB/s %4.0f GB/s %4.0f GB/s  %s%s\n",
               p->name, (double)p->capacity / (1u << 30), p->peak_flops / 1e12,
               p->hbm_bandwidth / 1e9, p->h2d_bandwidth / 1e9, p->d2h_bandwidth / 1e9,
               p->p2p_bandwidth / 1e9, p->description,
               strcmp(p->name, cham_preset_default_name()) == 0 ? " (default)" : "");
    }
    printf("\nFigures and their sources: docs/devices.md\n");
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

int cmd_devices(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[0], "--backend") == 0 && strcmp(argv[1], "cuda") == 0)
        return probe_cuda();
    if (argc == 2 && strcmp(argv[0], "--backend") == 0 && strcmp(argv[1], "sim") == 0)
        argc = 0;
    if (argc > 0) {
        bool help = strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0;
        if (!help)
            fprintf(stderr, "chameleon devices: unexpected argument \"%s\"\n", argv[0]);
        fprintf(help ? stdout : stderr,
                "usage: chameleon devices [--backend sim|cuda]\n"
                "Lists the sim presets; with --backend cuda, opens the real device\n"
                "and says what it is or why it cannot be used (exit 1).\n");
        return help ? 0 : 2;
    }
    list_presets();
    return 0;
}
