/* The experiments' registry, their shared helpers, and writing a result
 * out as CSV, JSON and SVG files (experiment.h). */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "experiment.h"

extern const exp_def_t exp_profiling, exp_max_size, exp_scaling, exp_layer_scaling,
    exp_stability, exp_record_stream, exp_parallelism, exp_policy_cache, exp_budget_sweep,
    exp_model_size, exp_swapadvisor, exp_kv_offload, exp_zoo, exp_fidelity;

static const exp_def_t *const all[] = {
    &exp_profiling,     &exp_max_size,      &exp_scaling,     &exp_layer_scaling,
    &exp_stability,     &exp_record_stream, &exp_parallelism, &exp_policy_cache,
    &exp_budget_sweep,  &exp_model_size,    &exp_swapadvisor, &exp_kv_offload,
    &exp_zoo,           &exp_fidelity,
};

size_t exp_count(void)
{
    return sizeof all / sizeof all[0];
}

const exp_def_t *exp_at(size_t i)
{
    return i < exp_count() ? all[i] : NULL;
}

const exp_def_t *exp_find(const char *name)
{
    for (size_t i = 0; i < exp_count(); i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    return NULL;
}

void exp_result_free(exp_result_t *r)
{
    for (size_t i = 0; i < r->n_tables; i++)
        exp_table_free(&r->tables[i]);
    for (size_t i = 0; i < r->n_plots; i++)
        plot_free(&r->plots[i]);
    r->n_tables = r->n_plots = 0;
}

exp_table_t *exp_result_table(exp_result_t *r, const char *name, const char *title,
                              size_t n_cols, const char *const *cols)
{
    assert(!strchr(name, '_'));   /* file names join words with '-', as experiments do */
    if (r->n_tables == EXP_MAX_TABLES || !exp_table_init(&r->tables[r->n_tables], name, title,
                                                          n_cols, cols))
        return NULL;
    return &r->tables[r->n_tables++];
}

plot_t *exp_result_plot(exp_result_t *r, const char *name, const char *title,
                            const char *x_label, const char *y_label)
{
    assert(!strchr(name, '_'));
    if (r->n_plots == EXP_MAX_PLOTS)
        return NULL;
    plot_init(&r->plots[r->n_plots], name, title, x_label, y_label);
    return &r->plots[r->n_plots++];
}

/* ---- helpers ----------------------------------------------------------------------*/

cham_model_config_t exp_llama(uint32_t hidden, uint32_t layers, uint32_t seq, uint32_t mbs)
{
    cham_model_config_t m;
    cham_model_preset("llama2-7b", &m);
    m.hidden = hidden;
    m.heads = m.kv_heads = hidden / 128 ? hidden / 128 : 1;
    m.ffn = (uint32_t)((8.0 / 3.0 * hidden + 255) / 256) * 256;
    m.layers = layers;
    m.seq = seq;
    m.mbs = mbs;
    return m;
}

void exp_training_setups(exp_setup_t s[2])
{
    s[0].label = "llama2-7b";
    cham_model_preset(s[0].label, &s[0].m);
    s[0].m.mbs = 4;
    s[0].m.dp = 8;
    s[0].m.zero = 3;
    s[1].label = "gpt2-1.5b";
    cham_model_preset(s[1].label, &s[1].m);
    s[1].m.mbs = 8;
    s[1].m.seq = 1024;
}

cham_status_t exp_run(const exp_config_t *c, const cham_model_config_t *m,
                      cham_strategy_t strategy, uint64_t capacity, uint64_t steps,
                      cham_run_result_t *r, char *err, size_t err_size)
{
    cham_run_config_t rc = cham_run_config_default();
    rc.plan_optimizer = false;      /* the optimizer where the row says */
    rc.model = *m;
    rc.strategy = strategy;
    rc.steps = steps ? steps : EXP_STABLE_STEPS;
    rc.runtime.device.preset = c->device;
    rc.runtime.device.capacity = capacity;
    cham_status_t st = cham_run(&rc, r);
    if (st != CHAM_OK) {
        snprintf(err, err_size, "%s", r->error);
        return st;
    }
    if (c->progress)
        fprintf(stderr, "  %-10s b%-3u L%-4u s%-6u h%-6u  %s\n", cham_strategy_name(strategy),
                m->mbs, m->layers, m->seq, m->hidden,
                r->status == CHAM_OK ? "ok" : cham_status_string(r->status));
    return CHAM_OK;
}

void exp_optimizer_name(const cham_run_result_t *r, char *buf, size_t size)
{
    if (r->host_optimizer)
        snprintf(buf, size, "host:%u", r->device_groups);
    else
        snprintf(buf, size, "device");
}

cham_status_t exp_largest(exp_fits_fn fits, void *user, uint32_t limit_k, int64_t *k_out,
                          double *step_s, char *err, size_t err_size)
{
    bool ok;
    double t;
    *k_out = -1;
    *step_s = NAN;
    cham_status_t st = fits(user, 0, &ok, &t, err, err_size);
    if (st != CHAM_OK || !ok)
        return st;
    uint32_t good = 0, bad = 1;
    *step_s = t;
    while (bad <= limit_k) {
        if ((st = fits(user, bad, &ok, &t, err, err_size)) != CHAM_OK)
            return st;
        if (!ok)
            break;
        good = bad;
        *step_s = t;
        bad *= 2;
    }
    if (bad > limit_k)                      /* never failed within the limit */
        bad = limit_k + 1;
    while (bad - good > 1) {
        uint32_t mid = good + (bad - good) / 2;
        if ((st = fits(user, mid, &ok, &t, err, err_size)) != CHAM_OK)
            return st;
        if (ok) {
            good = mid;
            *step_s = t;
        } else {
            bad = mid;
        }
    }
    *k_out = good;
    return CHAM_OK;
}

static void record_step(const cham_run_step_t *st, void *user)
{
    exp_steps_t *s = user;
    uint64_t i = st->step;
    s->time_s[i] = (double)st->time_ns * 1e-9;
    s->stage[i] = st->stage;
    s->on_demand[i] = st->on_demand;
    s->passive[i] = st->passive;
    s->validated[i] = st->info.validated;
    s->n = i + 1;
}

cham_status_t exp_run_steps(const exp_config_t *c, cham_run_config_t *rc, exp_steps_t *s,
                            cham_run_result_t *r, char *err, size_t err_size)
{
    size_t n = rc->steps ? rc->steps : 1;
    *s = (exp_steps_t){.time_s = calloc(n, sizeof *s->time_s),
                       .stage = calloc(n, sizeof *s->stage),
                       .on_demand = calloc(n, sizeof *s->on_demand),
                       .passive = calloc(n, sizeof *s->passive),
                       .validated = calloc(n, sizeof *s->validated)};
    if (!s->time_s || !s->stage || !s->on_demand || !s->passive || !s->validated) {
        exp_steps_free(s);
        snprintf(err, err_size, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    rc->runtime.device.preset = c->device;
    rc->on_step = record_step;
    rc->user = s;
    cham_status_t st = cham_run(rc, r);
    if (st != CHAM_OK)
        snprintf(err, err_size, "%s", r->error);
    else if (c->progress)
        fprintf(stderr, "  %-10s %llu steps: %s\n", cham_strategy_name(rc->strategy),
                (unsigned long long)r->steps,
                r->status == CHAM_OK ? "ok" : cham_status_string(r->status));
    return st;
}

void exp_steps_free(exp_steps_t *s)
{
    free(s->time_s);
    free(s->stage);
    free(s->on_demand);
    free(s->passive);
    free(s->validated);
    memset(s, 0, sizeof *s);
}

/* ---- output -----------------------------------------------------------------------*/

static json_t *table_json(const exp_table_t *t)
{
    json_t *j = json_object(), *cols = json_array(), *rows = json_array();
    for (size_t k = 0; k < t->n_cols; k++)
        json_array_append_new(cols, json_string(t->cols[k]));
    for (size_t r = 0; r < t->n_rows; r++) {
        json_t *row = json_array();
        for (size_t k = 0; k < t->n_cols; k++) {
            const exp_cell_t *c = &t->cells[r * t->n_cols + k];
            json_array_append_new(row, c->text[0] ? json_string(c->text)
                                                  : plot_json_number(c->num));
        }
        json_array_append_new(rows, row);
    }
    json_object_set_new(j, "name", json_string(t->name));
    json_object_set_new(j, "title", json_string(t->title));
    json_object_set_new(j, "columns", cols);
    json_object_set_new(j, "rows", rows);
    return j;
}

bool exp_result_write(const exp_def_t *e, const exp_config_t *c, const exp_result_t *r,
                      const char *dir, char *err, size_t err_size)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        snprintf(err, err_size, "%s: cannot make the directory: %s", dir, strerror(errno));
        return false;
    }
    char path[4096];
    for (size_t i = 0; i < r->n_tables; i++) {
        snprintf(path, sizeof path, "%s/%s.csv", dir, r->tables[i].name);
        if (!exp_table_write_csv(&r->tables[i], path))
            goto fail;
    }
    for (size_t i = 0; i < r->n_plots; i++) {
        snprintf(path, sizeof path, "%s/%s.svg", dir, r->plots[i].name);
        if (!plot_write_svg(&r->plots[i], path))
            goto fail;
    }
    json_t *j = json_object(), *tables = json_array();
    for (size_t i = 0; i < r->n_tables; i++)
        json_array_append_new(tables, table_json(&r->tables[i]));
    json_object_set_new(j, "experiment", json_string(e->name));
    json_object_set_new(j, "device", json_string(c->device));
    json_object_set_new(j, "reduced", json_boolean(c->reduced));
    json_object_set_new(j, "summary", json_string(r->summary));
    json_object_set_new(j, "tables", tables);
    snprintf(path, sizeof path, "%s/%s.json", dir, e->name);
    int bad = json_dump_file(j, path, JSON_INDENT(2));
    json_decref(j);
    if (bad)
        goto fail;
    return true;
fail:
    snprintf(err, err_size, "%s: cannot write: %s", path, strerror(errno));
    return false;
}
