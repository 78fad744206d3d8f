/* The paper's evaluation reproduced in the simulator (docs/experiments.md):
 * each experiment runs the workload generator under the memory policies
 * (cham_run), and returns its result as tables and plots that
 * `chameleon experiment` prints and writes as CSV, JSON and SVG, and that
 * the tests read at a reduced size to assert the qualitative result. */
#ifndef CHAM_EXPERIMENT_H
#define CHAM_EXPERIMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "chameleon/chameleon.h"
#include "plot.h"                /* plots, the memory curve, JSON numbers */

/* ---- tables -----------------------------------------------------------------*/

#define EXP_MAX_COLS 20

/* A cell: a number (NAN for none) shown with a format, or a text. */
typedef struct exp_cell {
    double num;
    char text[48];               /* shown when not "" */
} exp_cell_t;

typedef struct exp_table {
    char name[48];               /* file stem: NAME.csv, in the JSON */
    char title[160];
    size_t n_cols;
    char cols[EXP_MAX_COLS][40];
    size_t n_rows, cap_rows;
    exp_cell_t *cells;           /* n_rows x n_cols */
} exp_table_t;

/* A table with columns; false when the host is out of memory. */
bool exp_table_init(exp_table_t *t, const char *name, const char *title, size_t n_cols,
                    const char *const *cols);
void exp_table_free(exp_table_t *t);
/* A new row of NAN cells; its index, or -1 when the host is out of memory. */
long exp_table_add_row(exp_table_t *t);
void exp_table_set(exp_table_t *t, size_t row, size_t col, double v);
void exp_table_set_text(exp_table_t *t, size_t row, size_t col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The cell at the row whose first column reads `row` and the column named
 * `col`: its number (NAN when absent or a text). */
double exp_table_get(const exp_table_t *t, const char *row, const char *col);

/* Prints the table aligned, numbers with up to 4 significant decimals. */
void exp_table_print(const exp_table_t *t, FILE *f);
/* CSV (RFC 4180) and a JSON object {name, title, columns, rows}. */
bool exp_table_write_csv(const exp_table_t *t, const char *path);

/* ---- experiments ---------------------------------------------------------------*/

#define EXP_MAX_TABLES 4
#define EXP_MAX_PLOTS 16              /* zoo: one per job */

typedef struct exp_result {
    size_t n_tables, n_plots;
    exp_table_t tables[EXP_MAX_TABLES];
    plot_t plots[EXP_MAX_PLOTS];
    char summary[1024];          /* the finding in a few sentences */
} exp_result_t;

void exp_result_free(exp_result_t *r);
/* The result's next table (exp_table_init) or plot (plot_init); NULL
 * when the result has EXP_MAX_TABLES / EXP_MAX_PLOTS already or the host is
 * out of memory. */
exp_table_t *exp_result_table(exp_result_t *r, const char *name, const char *title,
                              size_t n_cols, const char *const *cols);
plot_t *exp_result_plot(exp_result_t *r, const char *name, const char *title,
                            const char *x_label, const char *y_label);

typedef struct exp_config {
    const char *device;          /* preset (each experiment has a default) */
    bool reduced;                /* the tests' size: seconds, same shape */
    bool progress;               /* a line per run on stderr */
    /* 0: the whole experiment. k > 0: only its k-th part, so a test can
     * run the parts of a long experiment as separate CTest tests; only
     * model-size has parts (1-4, the rows of its table: ascend-910b
     * layers, hidden, a100-80g layers, hidden), and refuses any other k. */
    unsigned part;
} exp_config_t;

typedef struct exp_def {
    const char *name;
    const char *what;            /* one line for --list */
    const char *device;          /* default preset */
    /* CHAM_OK with r filled; else err says why. */
    cham_status_t (*run)(const exp_config_t *c, exp_result_t *r, char *err, size_t err_size);
} exp_def_t;

size_t exp_count(void);
const exp_def_t *exp_at(size_t i);
const exp_def_t *exp_find(const char *name);

/* Writes every table (CSV), the whole result (NAME.json) and every plot
 * (SVG) into dir, made if missing. false with err when it cannot. */
bool exp_result_write(const exp_def_t *e, const exp_config_t *c, const exp_result_t *r,
                      const char *dir, char *err, size_t err_size);

/* ---- helpers for experiments ------------------------------------------------------*/

/* Llama 2's shape at hidden h: heads of 128, ffn 8/3 h rounded to 256. */
cham_model_config_t exp_llama(uint32_t hidden, uint32_t layers, uint32_t seq, uint32_t mbs);
/* The training set-ups of issue 17's comparisons, at full size: s[0]
 * llama2-7b (mbs 4, ZeRO-3 over 8 devices), s[1] gpt2-1.5b (mbs 8,
 * sequence 1024, one device). Each experiment reduces them its own way. */
typedef struct exp_setup {
    const char *label;
    cham_model_config_t m;
} exp_setup_t;
void exp_training_setups(exp_setup_t s[2]);
/* One run; r->status says how it went. steps 0 = enough to reach Stable. */
cham_status_t exp_run(const exp_config_t *c, const cham_model_config_t *m,
                      cham_strategy_t strategy, uint64_t capacity, uint64_t steps,
                      cham_run_result_t *r, char *err, size_t err_size);
/* The largest number of units k in [0, limit_k] whose size runs (fits(user,
 * k) sets *ok): k = 0 first, then doubling until a failure, then
 * bisecting. *k_out is -1 when even k = 0 fails; *step_s the step time of
 * the run at *k_out (NAN then). */
typedef cham_status_t (*exp_fits_fn)(void *user, uint32_t k, bool *ok, double *step_s,
                                     char *err, size_t err_size);
cham_status_t exp_largest(exp_fits_fn fits, void *user, uint32_t limit_k, int64_t *k_out,
                          double *step_s, char *err, size_t err_size);

/* Where the run's optimizer ran, as `--optimizer` says it: "device" or
 * "host:N" (N groups updated on the device), into buf. */
void exp_optimizer_name(const cham_run_result_t *r, char *buf, size_t size);

/* Steps that reach Stable and a few more with the default stage machine. */
#define EXP_STABLE_STEPS 12

/* A run's step-by-step record. */
typedef struct exp_steps {
    uint64_t n;
    double *time_s;              /* simulated */
    cham_stage_t *stage;
    uint64_t *on_demand, *passive;
    bool *validated;
} exp_steps_t;

/* Runs rc (its device preset set from c) and records every step in *s
 * (freed with exp_steps_free). */
cham_status_t exp_run_steps(const exp_config_t *c, cham_run_config_t *rc, exp_steps_t *s,
                            cham_run_result_t *r, char *err, size_t err_size);
void exp_steps_free(exp_steps_t *s);

#endif
