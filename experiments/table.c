/* Result tables: rows of numbers or texts, printed aligned for the
 * terminal and written as CSV for spreadsheets (experiment.h). */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "experiment.h"

bool exp_table_init(exp_table_t *t, const char *name, const char *title, size_t n_cols,
                    const char *const *cols)
{
    memset(t, 0, sizeof *t);
    if (n_cols > EXP_MAX_COLS)
        return false;
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->title, sizeof t->title, "%s", title);
    t->n_cols = n_cols;
    for (size_t i = 0; i < n_cols; i++)
        snprintf(t->cols[i], sizeof t->cols[i], "%s", cols[i]);
    return true;
}

void exp_table_free(exp_table_t *t)
{
    free(t->cells);
    t->cells = NULL;
    t->n_rows = t->cap_rows = 0;
}

long exp_table_add_row(exp_table_t *t)
{
    if (t->n_rows == t->cap_rows) {
        size_t cap = t->cap_rows ? 2 * t->cap_rows : 8;
        exp_cell_t *c = realloc(t->cells, cap * t->n_cols * sizeof *c);
        if (!c)
            return -1;
        t->cells = c;
        t->cap_rows = cap;
    }
    exp_cell_t *row = &t->cells[t->n_rows * t->n_cols];
    for (size_t i = 0; i < t->n_cols; i++)
        row[i] = (exp_cell_t){.num = NAN};
    return (long)t->n_rows++;
}

static exp_cell_t *cell(exp_table_t *t, size_t row, size_t col)
{
    return row < t->n_rows && col < t->n_cols ? &t->cells[row * t->n_cols + col] : NULL;
}

void exp_table_set(exp_table_t *t, size_t row, size_t col, double v)
{
    exp_cell_t *c = cell(t, row, col);
    if (c)
        *c = (exp_cell_t){.num = v};
}

void exp_table_set_text(exp_table_t *t, size_t row, size_t col, const char *fmt, ...)
{
    exp_cell_t *c = cell(t, row, col);
    if (!c)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->text, sizeof c->text, fmt, ap);
    va_end(ap);
    c->num = NAN;
}

double exp_table_get(const exp_table_t *t, const char *row, const char *col)
{
    size_t k = 0;
    while (k < t->n_cols && strcmp(t->cols[k], col) != 0)
        k++;
    if (k == t->n_cols)
        return NAN;
    for (size_t r = 0; r < t->n_rows; r++) {
        const exp_cell_t *first = &t->cells[r * t->n_cols];
        if (strcmp(first->text, row) == 0)
            return t->cells[r * t->n_cols + k].num;
    }
    return NAN;
}

/* A cell as text: integers without decimals, others with up to 4
 * significant decimals, NAN as "-". */
static void format_cell(const exp_cell_t *c, char *buf, size_t size)
{
    if (c->text[0])
        snprintf(buf, size, "%s", c->text);
    else if (isnan(c->num))
        snprintf(buf, size, "-");
    else if (c->num == floor(c->num) && fabs(c->num) < 1e15)
        snprintf(buf, size, "%.0f", c->num);
    else
        snprintf(buf, size, "%.4g", c->num);
}

void exp_table_print(const exp_table_t *t, FILE *f)
{
    size_t width[EXP_MAX_COLS];
    char buf[64];
    for (size_t k = 0; k < t->n_cols; k++) {
        width[k] = strlen(t->cols[k]);
        for (size_t r = 0; r < t->n_rows; r++) {
            format_cell(&t->cells[r * t->n_cols + k], buf, sizeof buf);
            if (strlen(buf) > width[k])
                width[k] = strlen(buf);
        }
    }
    fprintf(f, "%s\n", t->title);
    for (size_t k = 0; k < t->n_cols; k++)
        fprintf(f, k ? "  %*s" : "%-*s", (int)width[k], t->cols[k]);
    fprintf(f, "\n");
    for (size_t r = 0; r < t->n_rows; r++) {
        for (size_t k = 0; k < t->n_cols; k++) {
            format_cell(&t->cells[r * t->n_cols + k], buf, sizeof buf);
            fprintf(f, k ? "  %*s" : "%-*s", (int)width[k], buf);
        }
        fprintf(f, "\n");
    }
}

bool exp_table_write_csv(const exp_table_t *t, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    char buf[64];
    for (size_t k = 0; k < t->n_cols; k++) {
        if (k)
            fputc(',', f);
        plot_csv_field(f, t->cols[k]);
    }
    fputs("\r\n", f);
    for (size_t r = 0; r < t->n_rows; r++) {
        for (size_t k = 0; k < t->n_cols; k++) {
            const exp_cell_t *c = &t->cells[r * t->n_cols + k];
            if (k)
                fputc(',', f);
            if (!c->text[0] && isnan(c->num))
                continue;                         /* an empty field */
            if (!c->text[0])
                snprintf(buf, sizeof buf, "%.17g", c->num);
            plot_csv_field(f, c->text[0] ? c->text : buf);
        }
        fputs("\r\n", f);
    }
    return fclose(f) == 0;
}
