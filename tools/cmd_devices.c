/* `chameleon devices`: the simulated device presets and their figures. */
#include <stdio.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "commands.h"

int cmd_devices(int argc, char **argv)
{
    if (argc > 0) {
        bool help = strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0;
        fprintf(help ? stdout : stderr, "%susage: chameleon devices\n",
                help ? "" : "chameleon devices: takes no arguments\n");
        return help ? 0 : 2;
    }
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
    return 0;
}
