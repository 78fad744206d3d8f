/* The machine a benchmark runs on (machine.h): clock cost and CPU model. */
#include "lib/machine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double bench_clock_cost_ns(void)
{
    enum { N = 200000 };
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        uint64_t t0 = bench_now_ns(), t = t0;
        for (int i = 0; i < N; i++)
            t = bench_now_ns();
        double c = (double)(t - t0) / N;
        if (c < best)
            best = c;
    }
    return best;
}

/* The value of the first "key : value" line of /proc/cpuinfo whose key is
 * exactly key, or "". */
static void cpuinfo_field(const char *key, char *buf, size_t size)
{
    buf[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0 || (line[klen] != ' ' && line[klen] != '\t' &&
                                               line[klen] != ':'))
            continue;
        const char *p = strchr(line, ':');
        if (!p)
            continue;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        snprintf(buf, size, "%.*s", (int)strcspn(p, "\n"), p);
        break;
    }
    fclose(f);
}

void bench_cpu_model(char *buf, size_t size)
{
    char name[160], family[16], model[16];
    cpuinfo_field("model name", name, sizeof name);
    cpuinfo_field("cpu family", family, sizeof family);
    cpuinfo_field("model", model, sizeof model);
    if (!name[0])
        snprintf(name, sizeof name, "unknown CPU");
    if (family[0] && model[0])
        snprintf(buf, size, "%s (family %s, model %s)", name, family, model);
    else
        snprintf(buf, size, "%s", name);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

uint64_t bench_median_u64(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_u64);
    return v[n / 2];
}

void bench_output_by_line(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
}
