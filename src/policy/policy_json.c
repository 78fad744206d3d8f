/* Policies as JSON files: cham_policy_save_json and cham_policy_load_json.
 * The schema, its invariants and the error style are in
 * docs/policy-format.md; this file is their one implementation.
 *
 * The conventions are the profile's (docs/profile-format.md), and so is the
 * machinery (src/json/): loading is strict (every key
 * required, unknown keys are errors), a failure names the file and the
 * position ("FILE:LINE:COL: ..." for syntax, "FILE: items[3].free_op: ..."
 * for content), quantities are JSON integers 0 .. 2^53 - 1 and the 64-bit
 * bit patterns of a tensor use (data_ptr, history) are hex strings. The
 * invariants of policy-impl.h (check_policy) are checked before saving and
 * after loading, so a file this library saves is one it loads. */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chameleon/policy.h"
#include "common/assert.h"
#include "common/message.h"
#include "policy/policy-impl.h"
#include "json/read.h"
#include "json/write.h"

#define FORMAT_NAME "chameleon-policy"
#define FORMAT_VERSION 1
#define MAX_EXACT CHAM_JSON_MAX_EXACT
#define N_KEYS(a) (sizeof(a) / sizeof((a)[0]))

/* The keys of each object, in the order they are written. */
static const char *const top_keys[] = {
    "format", "version", "planner", "capacity", "usable", "peak_without_swaps",
    "predicted_peak", "step_ns", "predicted_step_ns", "n_ops", "layers", "items"};
static const char *const layer_keys[] = {"start_op", "n_ops", "phase", "time_ns",
                                         "remaining_ns"};
static const char *const item_keys[] = {
    "storage", "bytes", "out_use", "in_use", "swap_out_op", "swap_out_done_op", "free_op",
    "swap_in_layer", "swap_in_op", "use_op", "score", "stall_ns", "?recompute_ns", "?made_op", "?wraps",
    "?out_kept"};

/* ---- the invariants -----------------------------------------------------------*/

/* A tensor use's own invariants (as in a profile): on failure msg gets
 * "PREFIX.field: what is wrong". */
static bool check_use(const cham_tensor_use_t *u, const char *prefix, char *msg,
                      size_t msg_size)
{
    const char *big = u->storage > MAX_EXACT ? "storage"
                      : u->bytes > MAX_EXACT ? "bytes"
                      : u->storage_bytes > MAX_EXACT ? "storage_bytes" : NULL;
    if (big) {
        cham_set_err(msg, msg_size, "%s.%s: above 2^53 - 1", prefix, big);
        return false;
    }
    if ((int)u->dtype < 0 || (size_t)u->dtype >= CHAM_JSON_N_DTYPES) {
        cham_set_err(msg, msg_size, "%s.dtype: unknown dtype %d", prefix, (int)u->dtype);
        return false;
    }
    if (u->bytes > u->storage_bytes) {
        cham_set_err(msg, msg_size, "%s.bytes: %" PRIu64 " is more than storage_bytes %" PRIu64
                     " (a view lies inside its storage)", prefix, u->bytes, u->storage_bytes);
        return false;
    }
    return true;
}

/* Checks an item's op fields against n_ops and each other. */
static bool check_item_ops(const cham_policy_t *p, size_t i, char *msg, size_t msg_size)
{
    const cham_policy_item_t *it = &p->items[i];
    /* Across the step's end the copy may end and the block come free in
     * the next step, ops n_ops + k (k < n_ops). */
    const struct {
        const char *key;
        uint32_t v;
        size_t end;
    } ops[] = {{"swap_out_op", it->swap_out_op, p->n_ops},
               {"swap_out_done_op", it->swap_out_done_op, (1 + it->wraps) * p->n_ops},
               {"free_op", it->free_op, (1 + it->wraps) * p->n_ops},
               {"swap_in_op", it->swap_in_op, p->n_ops},
               {"use_op", it->use_op, p->n_ops}};
    for (size_t k = 0; k < N_KEYS(ops); k++) {
        if (ops[k].v >= ops[k].end) {
            cham_set_err(msg, msg_size, "items[%zu].%s: op %" PRIu32 " is out of range: the "
                         "policy plans %zu ops (0 .. %zu%s)", i, ops[k].key, ops[k].v,
                         p->n_ops, ops[k].end ? ops[k].end - 1 : 0,
                         ops[k].end > p->n_ops ? ", from n_ops on the next step's" : "");
            return false;
        }
    }
    if (it->swap_in_layer >= p->n_layers) {
        cham_set_err(msg, msg_size, "items[%zu].swap_in_layer: layer %" PRIu32 " is out of "
                     "range: \"layers\" has %zu", i, it->swap_in_layer, p->n_layers);
        return false;
    }
    if (it->wraps && it->recompute) {
        cham_set_err(msg, msg_size, "items[%zu].wraps: a recomputed item cannot wrap (only "
                     "model state is away across the step's end)", i);
        return false;
    }
    if (it->wraps && !(it->swap_out_op < it->free_op && it->swap_in_op <= it->use_op &&
                       it->use_op <= it->swap_out_op)) {
        cham_set_err(msg, msg_size, "items[%zu]: ops %" PRIu32 ", %" PRIu32 ", %" PRIu32 ", %"
                     PRIu32 " out of order for an item that wraps (swap_out_op < free_op; "
                     "in the next step swap_in_op <= use_op <= swap_out_op)", i,
                     it->swap_out_op, it->free_op, it->swap_in_op, it->use_op);
        return false;
    }
    if (it->wraps && it->free_op > p->n_ops && it->free_op - p->n_ops > it->swap_in_op) {
        cham_set_err(msg, msg_size, "items[%zu].free_op: %" PRIu32 " is op %zu of the next "
                     "step, after its swap_in_op %" PRIu32 " there", i, it->free_op,
                     (size_t)it->free_op - p->n_ops, it->swap_in_op);
        return false;
    }
    if (it->swap_out_done_op >= p->n_ops && it->swap_out_done_op >= it->free_op) {
        cham_set_err(msg, msg_size, "items[%zu].swap_out_done_op: %" PRIu32 " is in the next "
                     "step, not before free_op %" PRIu32, i, it->swap_out_done_op, it->free_op);
        return false;
    }
    const char *order = "(swap_out_op < free_op <= swap_in_op <= use_op)";
    if (it->swap_out_done_op < it->swap_out_op) {
        cham_set_err(msg, msg_size, "items[%zu].swap_out_done_op: %" PRIu32 " is before "
                     "swap_out_op %" PRIu32 " (a copy completes after it starts)", i,
                     it->swap_out_done_op, it->swap_out_op);
        return false;
    }
    if (it->free_op <= it->swap_out_op) {
        cham_set_err(msg, msg_size, "items[%zu].free_op: %" PRIu32 " is not after "
                     "swap_out_op %" PRIu32 " %s", i, it->free_op, it->swap_out_op, order);
        return false;
    }
    if (!it->wraps && it->swap_in_op < it->free_op) {
        cham_set_err(msg, msg_size, "items[%zu].swap_in_op: %" PRIu32 " is before free_op %"
                     PRIu32 " %s", i, it->swap_in_op, it->free_op, order);
        return false;
    }
    if (!it->wraps && it->use_op < it->swap_in_op) {
        cham_set_err(msg, msg_size, "items[%zu].use_op: %" PRIu32 " is before swap_in_op %"
                     PRIu32 " %s", i, it->use_op, it->swap_in_op, order);
        return false;
    }
    if (i > 0 && it->swap_out_op < p->items[i - 1].swap_out_op) {
        cham_set_err(msg, msg_size, "items[%zu].swap_out_op: %" PRIu32 " is before items[%zu]'s %"
                     PRIu32 " (items are in swap-out order)", i, it->swap_out_op, i - 1,
                     p->items[i - 1].swap_out_op);
        return false;
    }
    return true;
}

/* Checks the invariants of policy-impl.h and the format's bounds
 * (docs/policy-format.md, "Invariants"): on failure msg gets
 * "JSON.PATH: what is wrong". */
static cham_status_t check_policy(const cham_policy_t *p, char *msg, size_t msg_size)
{
    size_t planner_len = strnlen(p->planner, sizeof p->planner);
    json_t *name = planner_len < sizeof p->planner ? json_string(p->planner) : NULL;
    if (!name) {
        cham_set_err(msg, msg_size, "planner: not a valid UTF-8 string of at most %zu bytes",
                     sizeof p->planner - 1);
        return CHAM_ERR_INVALID_ARG;
    }
    json_decref(name);
    const struct {
        const char *key;
        uint64_t v;
    } top[] = {{"capacity", p->capacity}, {"usable", p->usable},
               {"peak_without_swaps", p->peak_without_swaps},
               {"predicted_peak", p->predicted_peak}, {"step_ns", p->step_ns},
               {"predicted_step_ns", p->predicted_step_ns}};
    for (size_t i = 0; i < N_KEYS(top); i++) {
        if (top[i].v > MAX_EXACT) {
            cham_set_err(msg, msg_size, "%s: %" PRIu64 " is above 2^53 - 1", top[i].key,
                         top[i].v);
            return CHAM_ERR_INVALID_ARG;
        }
    }
    if (p->n_ops > UINT32_MAX) {
        cham_set_err(msg, msg_size, "n_ops: %zu ops, more than %" PRIu32, p->n_ops, UINT32_MAX);
        return CHAM_ERR_INVALID_ARG;
    }
    /* The layers tile [0, n_ops) in order. */
    uint64_t next = 0;
    for (size_t k = 0; k < p->n_layers; k++) {
        const cham_logical_layer_t *l = &p->layers[k];
        if (l->start_op != next) {
            cham_set_err(msg, msg_size, "layers[%zu].start_op: %" PRIu32 ", expected %" PRIu64
                         " (layers tile the ops [0, n_ops) in order)", k, l->start_op, next);
            return CHAM_ERR_INVALID_ARG;
        }
        if (l->n_ops == 0 || l->n_ops > p->n_ops - next) {
            cham_set_err(msg, msg_size, "layers[%zu].n_ops: %" PRIu32 " ops from op %" PRIu32
                         " %s (layers tile the ops [0, n_ops) = [0, %zu) in order)", k,
                         l->n_ops, l->start_op, l->n_ops == 0 ? "is empty" : "go past n_ops",
                         p->n_ops);
            return CHAM_ERR_INVALID_ARG;
        }
        if ((int)l->phase < 0 || (size_t)l->phase >= CHAM_JSON_N_PHASES) {
            cham_set_err(msg, msg_size, "layers[%zu].phase: unknown phase %d", k, (int)l->phase);
            return CHAM_ERR_INVALID_ARG;
        }
        if (l->time_ns > MAX_EXACT || l->remaining_ns > MAX_EXACT) {
            cham_set_err(msg, msg_size, "layers[%zu].%s: above 2^53 - 1", k,
                         l->time_ns > MAX_EXACT ? "time_ns" : "remaining_ns");
            return CHAM_ERR_INVALID_ARG;
        }
        next += l->n_ops;
    }
    if (next != p->n_ops) {
        cham_set_err(msg, msg_size, "layers: the layers cover ops [0, %" PRIu64 "), not [0, "
                     "n_ops) = [0, %zu) (layers tile the ops in order)", next, p->n_ops);
        return CHAM_ERR_INVALID_ARG;
    }
    for (size_t i = 0; i < p->n_items; i++) {
        const cham_policy_item_t *it = &p->items[i];
        const char *big = it->storage > MAX_EXACT ? "storage"
                          : it->bytes > MAX_EXACT ? "bytes"
                          : it->stall_ns > MAX_EXACT ? "stall_ns" : NULL;
        if (big) {
            cham_set_err(msg, msg_size, "items[%zu].%s: above 2^53 - 1", i, big);
            return CHAM_ERR_INVALID_ARG;
        }
        char prefix[48];
        snprintf(prefix, sizeof prefix, "items[%zu].out_use", i);
        if (!check_use(&it->out_use, prefix, msg, msg_size))
            return CHAM_ERR_INVALID_ARG;
        snprintf(prefix, sizeof prefix, "items[%zu].in_use", i);
        if (!check_use(&it->in_use, prefix, msg, msg_size))
            return CHAM_ERR_INVALID_ARG;
        if (!isfinite(it->score)) {
            cham_set_err(msg, msg_size, "items[%zu].score: not a finite number", i);
            return CHAM_ERR_INVALID_ARG;
        }
        if (!check_item_ops(p, i, msg, msg_size))
            return CHAM_ERR_INVALID_ARG;
    }
    return CHAM_OK;
}

/* ---- saving -----------------------------------------------------------------------*/

static json_t *layer_to_json(const cham_logical_layer_t *l)
{
    json_t *o = json_object();
    bool ok = o && cham_json_put(o, "start_op", json_integer(l->start_op)) &&
              cham_json_put(o, "n_ops", json_integer(l->n_ops)) &&
              cham_json_put(o, "phase", json_string(cham_json_phase_names[l->phase])) &&
              cham_json_put(o, "time_ns", json_integer((json_int_t)l->time_ns)) &&
              cham_json_put(o, "remaining_ns", json_integer((json_int_t)l->remaining_ns));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *item_to_json(const cham_policy_item_t *it)
{
    json_t *o = json_object();
    /* cham_json_put takes the value's reference even when it fails. */
    bool ok = o && cham_json_put(o, "storage", json_integer((json_int_t)it->storage)) &&
              cham_json_put(o, "bytes", json_integer((json_int_t)it->bytes)) &&
              cham_json_put(o, "out_use", cham_json_use_to_json(&it->out_use)) &&
              cham_json_put(o, "in_use", cham_json_use_to_json(&it->in_use)) &&
              cham_json_put(o, "swap_out_op", json_integer(it->swap_out_op)) &&
              cham_json_put(o, "swap_out_done_op", json_integer(it->swap_out_done_op)) &&
              cham_json_put(o, "free_op", json_integer(it->free_op)) &&
              cham_json_put(o, "swap_in_layer", json_integer(it->swap_in_layer)) &&
              cham_json_put(o, "swap_in_op", json_integer(it->swap_in_op)) &&
              cham_json_put(o, "use_op", json_integer(it->use_op)) &&
              cham_json_put(o, "score", json_real(it->score)) &&
              cham_json_put(o, "stall_ns", json_integer((json_int_t)it->stall_ns)) &&
              (!it->recompute ||
               cham_json_put(o, "recompute_ns", json_integer((json_int_t)it->recompute_ns))) &&
              (!it->recompute || it->made_op == UINT32_MAX ||
               cham_json_put(o, "made_op", json_integer(it->made_op))) &&
              (!it->wraps || cham_json_put(o, "wraps", json_true())) &&
              (!it->out_kept || cham_json_put(o, "out_kept", json_true()));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The layout: top-level keys one per line, then one line per layer and per
 * item, so a file reads and diffs line by line. */
static bool write_policy(FILE *fp, const void *obj)
{
    const cham_policy_t *p = obj;
    fprintf(fp, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"planner\": ", FORMAT_NAME,
            FORMAT_VERSION);
    json_t *planner = json_string(p->planner);
    int rc = planner ? json_dumpf(planner, fp, JSON_ENCODE_ANY) : -1;
    json_decref(planner);
    if (rc != 0)
        return false;
    fprintf(fp, ",\n  \"capacity\": %" PRIu64 ",\n  \"usable\": %" PRIu64 ",\n"
            "  \"peak_without_swaps\": %" PRIu64 ",\n  \"predicted_peak\": %" PRIu64 ",\n"
            "  \"step_ns\": %" PRIu64 ",\n  \"predicted_step_ns\": %" PRIu64 ",\n"
            "  \"n_ops\": %zu,\n", p->capacity, p->usable, p->peak_without_swaps,
            p->predicted_peak, p->step_ns, p->predicted_step_ns, p->n_ops);
    fputs(p->n_layers ? "  \"layers\": [\n" : "  \"layers\": [", fp);
    for (size_t k = 0; k < p->n_layers; k++) {
        if (!cham_json_write_value(fp, layer_to_json(&p->layers[k]), k + 1 == p->n_layers))
            return false;
    }
    fputs(p->n_layers ? "  ],\n" : "],\n", fp);
    fputs(p->n_items ? "  \"items\": [\n" : "  \"items\": [", fp);
    for (size_t i = 0; i < p->n_items; i++) {
        if (!cham_json_write_value(fp, item_to_json(&p->items[i]), i + 1 == p->n_items))
            return false;
    }
    fputs(p->n_items ? "  ]\n}\n" : "]\n}\n", fp);
    return !ferror(fp);
}

cham_status_t cham_policy_save_json(const cham_policy_t *p, const char *path, char *err,
                                    size_t err_size)
{
    CHAM_ASSERT(p && path);
    cham_set_err(err, err_size, "%s", "");
    char why[256];
    cham_status_t st = check_policy(p, why, sizeof why);
    if (st != CHAM_OK) {
        cham_set_err(err, err_size, "%s: cannot save: %s", path, why);
        return st;
    }
    return cham_json_save_file(path, write_policy, p, err, err_size);
}

/* ---- loading ----------------------------------------------------------------------*/

typedef cham_json_reader_t reader_t;

/* obj[key] must be a tensor use object. */
static bool read_use_at(reader_t *r, const json_t *obj, const char *key, cham_tensor_use_t *u)
{
    size_t mark = cham_json_push_key(r, key);
    bool ok = cham_json_read_use(r, json_object_get(obj, key), u);
    cham_json_pop(r, mark);
    return ok;
}

static bool read_layer(reader_t *r, const json_t *v, cham_logical_layer_t *l)
{
    if (!cham_json_check_object(r, v, "a layer (an object)", layer_keys, N_KEYS(layer_keys)))
        return false;
    int phase = 0;
    bool ok = cham_json_read_u32(r, v, "start_op", UINT32_MAX, &l->start_op) &&
              cham_json_read_u32(r, v, "n_ops", UINT32_MAX, &l->n_ops) &&
              cham_json_read_name(r, v, "phase", "phase", cham_json_phase_names,
                                  CHAM_JSON_N_PHASES, &phase) &&
              cham_json_read_u53(r, v, "time_ns", &l->time_ns) &&
              cham_json_read_u53(r, v, "remaining_ns", &l->remaining_ns);
    l->phase = (cham_phase_t)phase;
    return ok;
}

static bool read_item(reader_t *r, const json_t *v, cham_policy_item_t *it)
{
    if (!cham_json_check_object(r, v, "an item (an object)", item_keys, N_KEYS(item_keys)))
        return false;
    return cham_json_read_u53(r, v, "storage", &it->storage) &&
           cham_json_read_u53(r, v, "bytes", &it->bytes) &&
           read_use_at(r, v, "out_use", &it->out_use) &&
           read_use_at(r, v, "in_use", &it->in_use) &&
           cham_json_read_u32(r, v, "swap_out_op", UINT32_MAX, &it->swap_out_op) &&
           cham_json_read_u32(r, v, "swap_out_done_op", UINT32_MAX, &it->swap_out_done_op) &&
           cham_json_read_u32(r, v, "free_op", UINT32_MAX, &it->free_op) &&
           cham_json_read_u32(r, v, "swap_in_layer", UINT32_MAX, &it->swap_in_layer) &&
           cham_json_read_u32(r, v, "swap_in_op", UINT32_MAX, &it->swap_in_op) &&
           cham_json_read_u32(r, v, "use_op", UINT32_MAX, &it->use_op) &&
           cham_json_read_number(r, v, "score", &it->score) &&
           cham_json_read_u53(r, v, "stall_ns", &it->stall_ns) &&
           (!(it->recompute = json_object_get(v, "recompute_ns") != NULL) ||
            cham_json_read_u53(r, v, "recompute_ns", &it->recompute_ns)) &&
           (!json_object_get(v, "made_op") ||
            cham_json_read_u32(r, v, "made_op", UINT32_MAX, &it->made_op)) &&
           (!json_object_get(v, "wraps") || cham_json_read_bool(r, v, "wraps", &it->wraps)) &&
           (!json_object_get(v, "out_kept") ||
            cham_json_read_bool(r, v, "out_kept", &it->out_kept));
}

static bool read_layers(reader_t *r, const json_t *root, cham_policy_t *p)
{
    size_t mark;
    const json_t *a = cham_json_read_array(r, root, "layers", &mark);
    if (!a)
        return false;
    bool ok = true;
    for (size_t k = 0; ok && k < json_array_size(a); k++) {
        size_t m = cham_json_push_index(r, k);
        cham_logical_layer_t l = {0};
        ok = read_layer(r, json_array_get(a, k), &l);
        if (ok && !cham_policy_add_layer(p, &l))
            ok = cham_json_fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
        cham_json_pop(r, m);
    }
    cham_json_pop(r, mark);
    return ok;
}

static bool read_items(reader_t *r, const json_t *root, cham_policy_t *p)
{
    size_t mark;
    const json_t *a = cham_json_read_array(r, root, "items", &mark);
    if (!a)
        return false;
    bool ok = true;
    for (size_t i = 0; ok && i < json_array_size(a); i++) {
        size_t m = cham_json_push_index(r, i);
        cham_policy_item_t it = {.made_op = UINT32_MAX};
        ok = read_item(r, json_array_get(a, i), &it);
        if (ok && !cham_policy_add_item(p, &it))
            ok = cham_json_fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
        cham_json_pop(r, m);
    }
    cham_json_pop(r, mark);
    return ok;
}


static bool read_planner(reader_t *r, const json_t *root, char *name, size_t size)
{
    size_t mark = cham_json_push_key(r, "planner");
    const json_t *v = json_object_get(root, "planner");
    bool ok = json_is_string(v) && json_string_length(v) < size &&
              strlen(json_string_value(v)) == json_string_length(v);
    if (ok)
        snprintf(name, size, "%s", json_string_value(v));
    else
        cham_json_fail_got(r, "a planner name (a string of at most 31 bytes)", v);
    cham_json_pop(r, mark);
    return ok;
}

static bool read_policy(reader_t *r, const json_t *root, cham_policy_t **out)
{
    if (!json_is_object(root))
        return cham_json_fail_got(r, "a JSON object at the top level", root);
    if (!cham_json_read_header(r, root, "policy", FORMAT_NAME, FORMAT_VERSION) ||
        !cham_json_check_object(r, root, "an object", top_keys, N_KEYS(top_keys)))
        return false;
    char planner[sizeof ((cham_policy_t *)0)->planner];
    if (!read_planner(r, root, planner, sizeof planner))
        return false;
    cham_policy_t *p = cham_policy_new(planner);
    if (!p)
        return cham_json_fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
    uint64_t n_ops = 0;
    bool ok = cham_json_read_u53(r, root, "capacity", &p->capacity) &&
              cham_json_read_u53(r, root, "usable", &p->usable) &&
              cham_json_read_u53(r, root, "peak_without_swaps", &p->peak_without_swaps) &&
              cham_json_read_u53(r, root, "predicted_peak", &p->predicted_peak) &&
              cham_json_read_u53(r, root, "step_ns", &p->step_ns) &&
              cham_json_read_u53(r, root, "predicted_step_ns", &p->predicted_step_ns) &&
              cham_json_read_u53(r, root, "n_ops", &n_ops);
    if (ok && (n_ops > UINT32_MAX || n_ops > SIZE_MAX)) {
        size_t mark = cham_json_push_key(r, "n_ops");
        ok = cham_json_fail(r, CHAM_ERR_INVALID_ARG, "%" PRIu64 " ops, more than %" PRIu32,
                            n_ops, UINT32_MAX);
        cham_json_pop(r, mark);
    }
    p->n_ops = (size_t)n_ops;
    ok = ok && read_layers(r, root, p) && read_items(r, root, p);
    if (ok) {
        char why[256];
        cham_status_t st = check_policy(p, why, sizeof why);
        if (st != CHAM_OK)
            ok = cham_json_fail(r, st, "%s", why);
    }
    if (!ok) {
        cham_policy_free(p);
        return false;
    }
    *out = p;
    return true;
}

cham_status_t cham_policy_load_json(const char *path, cham_policy_t **out, char *err,
                                    size_t err_size)
{
    CHAM_ASSERT(path && out);
    *out = NULL;
    cham_set_err(err, err_size, "%s", "");
    reader_t r = {.file = path, .err = err, .err_size = err_size, .status = CHAM_OK};
    json_t *root = cham_json_parse_file(&r, "a chameleon policy");
    if (!root)
        return r.status;
    read_policy(&r, root, out);
    json_decref(root);
    return r.status;
}
