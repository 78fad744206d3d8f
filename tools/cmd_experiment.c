/* `chameleon experiment`: one of the paper's experiments, reproduced in the
 * simulator (docs/experiments.md): a table on stdout, and CSV, JSON and SVG
 * files under --out. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "experiment.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chameleon experiment NAME [--device PRESET] [--out DIR] [--reduced]\n"
            "       chameleon experiment --list\n"
            "Runs one of the paper's experiments on the simulated device and prints its\n"
            "table; with --out, writes the tables as CSV, the result as NAME.json and the\n"
            "plots as SVG into DIR. --reduced runs the tests' smaller size.\n");
}

static void list(FILE *f)
{
    for (size_t i = 0; i < exp_count(); i++)
        fprintf(f, "  %-19s %s\n", exp_at(i)->name, exp_at(i)->what);
}

int cmd_experiment(int argc, char **argv)
{
    const char *name = NULL, *out = NULL;
    exp_config_t c = {.progress = true};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--list") == 0) {
            list(stdout);
            return 0;
        }
        if (strcmp(a, "--reduced") == 0) {
            c.reduced = true;
        } else if (strcmp(a, "--device") == 0 || strcmp(a, "--out") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "chameleon experiment: option %s needs a value\n", a);
                return 2;
            }
            *(a[2] == 'd' ? &c.device : &out) = argv[++i];
        } else if (a[0] == '-') {
            fprintf(stderr, "chameleon experiment: unknown option %s\n", a);
            return 2;
        } else if (name) {
            fprintf(stderr, "chameleon experiment: one experiment at a time (%s and %s)\n",
                    name, a);
            return 2;
        } else {
            name = a;
        }
    }
    if (!name) {
        usage(stderr);
        return 2;
    }
    const exp_def_t *e = exp_find(name);
    if (!e) {
        fprintf(stderr, "chameleon experiment: unknown experiment \"%s\"; they are:\n", name);
        list(stderr);
        return 2;
    }
    if (c.device && !cham_preset_find(c.device)) {
        fprintf(stderr, "chameleon experiment: unknown device \"%s\" (`chameleon devices`)\n",
                c.device);
        return 2;
    }
    if (!c.device)
        c.device = e->device;
    exp_result_t r = {0};
    char err[1024] = "";
    fprintf(stderr, "experiment %s on %s%s\n", e->name, c.device, c.reduced ? " (reduced)" : "");
    cham_status_t st = e->run(&c, &r, err, sizeof err);
    if (st != CHAM_OK) {
        fprintf(stderr, "chameleon experiment: %s: %s\n", e->name, err);
        exp_result_free(&r);
        return 1;
    }
    for (size_t i = 0; i < r.n_tables; i++) {
        printf("\n");
        exp_table_print(&r.tables[i], stdout);
    }
    printf("\n%s\n", r.summary);
    int rc = 0;
    if (out && !exp_result_write(e, &c, &r, out, err, sizeof err)) {
        fprintf(stderr, "chameleon experiment: %s\n", err);
        rc = 1;
    } else if (out) {
        printf("written to %s/\n", out);
    }
    exp_result_free(&r);
    return rc;
}
