/* `chameleon experiment`: one of the paper's experiments, reproduced in the
 * simulator (docs/experiments.md): a table on stdout, and CSV, JSON and SVG
 * files under --out. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "common/closest.h"
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
    static const tool_opt_t opts[] = {{"--list", false, NULL}, {"--reduced", false, NULL},
                                      {"--device", true, NULL}, {"--out", true, NULL}};
    if (tool_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    bool want_list = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        if (a[0] != '-') {
            if (name) {
                fprintf(stderr, "chameleon experiment: one experiment at a time (%s and %s)\n",
                        name, a);
                return 2;
            }
            name = a;
            continue;
        }
        const tool_opt_t *opt = tool_find_opt("experiment", opts, 4, argc, argv, &i, &v);
        if (!opt)
            return 2;
        if (strcmp(opt->name, "--list") == 0)
            want_list = true;
        else if (strcmp(opt->name, "--reduced") == 0)
            c.reduced = true;
        else if (strcmp(opt->name, "--device") == 0)
            c.device = v;
        else
            out = v;
    }
    if (want_list) {
        list(stdout);
        return 0;
    }
    if (!name) {
        usage(stderr);
        return 2;
    }
    const exp_def_t *e = exp_find(name);
    if (!e) {
        cham_closest_t near;
        cham_closest_init(&near, name);
        for (size_t i = 0; i < exp_count(); i++)
            cham_closest_offer(&near, exp_at(i)->name);
        const char *guess = cham_closest_result(&near);
        fprintf(stderr, "chameleon experiment: unknown experiment \"%s\"", name);
        if (guess)
            fprintf(stderr, "; did you mean %s? They are:\n", guess);
        else
            fprintf(stderr, "; they are:\n");
        list(stderr);
        return 2;
    }
    if (c.device && !tool_check_preset("experiment", "--device", c.device))
        return 2;
    if (tool_parse_only)
        return 0;
    if (out && !tool_check_output_dir("experiment", "--out", out, NULL))
        return 1;
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
