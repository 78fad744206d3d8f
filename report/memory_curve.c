/* The memory curve of a profiled step (plot.h): what the device held
 * op by op, what it would have held without the swaps (the profile's
 * rebuilt curve, paper Fig. 3), and the capacity. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plot.h"
#include "common/file.h"

void plot_csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

bool plot_memory_curve(const cham_profile_t *p, uint64_t capacity, const char *limit_name,
                      const char *dir, const char *name, char *err, size_t err_size)
{
    cham_profile_view_t v;
    cham_profile_get(p, &v);
    size_t n = 2 * v.n_ops;
    uint64_t *actual = malloc((n ? n : 1) * sizeof *actual);
    uint64_t *rebuilt = malloc((n ? n : 1) * sizeof *rebuilt);
    char path[4096];
    bool ok = actual && rebuilt;
    if (!ok)
        snprintf(err, err_size, "memory curve: out of host memory");
    if (ok && mkdir(dir, 0777) != 0 && errno != EEXIST) {
        snprintf(err, err_size, "%s: cannot make the directory: %s", dir, strerror(errno));
        ok = false;
    }
    if (ok) {
        cham_profile_memory_curve(p, actual, rebuilt);
        snprintf(path, sizeof path, "%s/%s.csv", dir, name);
        cham_out_t *o;
        ok = cham_out_open(path, &o, err, err_size) == CHAM_OK;
        if (ok) {
            FILE *f = cham_out_file(o);
            fputs("op,sample,name,in_use_bytes,without_swaps_bytes,capacity_bytes\r\n", f);
            for (size_t k = 0; k < n && cham_out_ok(o); k++) {
                cham_op_token_t tok = v.ops[k / 2].token;
                fprintf(f, "%zu,%s,", k / 2, k % 2 ? "after" : "before");
                plot_csv_field(f, (size_t)tok < v.n_tokens ? v.token_names[tok] : "?");
                fprintf(f, ",%llu,%llu,%llu\r\n", (unsigned long long)actual[k],
                        (unsigned long long)rebuilt[k], (unsigned long long)capacity);
            }
            ok = cham_out_commit(o, err, err_size) == CHAM_OK;
        }
    }
    if (ok) {
        /* GiB, or MiB for small devices. */
        double unit = capacity >= (UINT64_C(1) << 30) ? 1024.0 * 1024 * 1024 : 1024.0 * 1024;
        plot_t pl;
        char title[160];
        snprintf(title, sizeof title, "Device memory during step %llu",
                 (unsigned long long)v.step);
        plot_init(&pl, name, title, "op", unit > 1024.0 * 1024 ? "GiB" : "MiB");
        pl.y_from_zero = true;
        for (size_t k = 0; k < n && ok; k++) {
            double x = (double)k / 2;
            ok = plot_add(&pl, "in use", x, (double)actual[k] / unit) &&
                 plot_add(&pl, "without swaps", x, (double)rebuilt[k] / unit);
        }
        ok = ok && plot_add(&pl, limit_name, 0, (double)capacity / unit) &&
             plot_add(&pl, limit_name, n ? (double)(n - 1) / 2 : 1, (double)capacity / unit);
        snprintf(path, sizeof path, "%s/%s.svg", dir, name);
        if (ok && !plot_write_svg(&pl, path)) {
            snprintf(err, err_size, "%s: cannot write: %s", path, strerror(errno));
            ok = false;
        } else if (!ok) {
            snprintf(err, err_size, "memory curve: out of host memory");
        }
        plot_free(&pl);
    }
    free(actual);
    free(rebuilt);
    return ok;
}
