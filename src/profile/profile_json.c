/* Detailed profiles as JSON files: cham_profile_save_json and
 * cham_profile_load_json. The schema, its invariants and the error style
 * are in docs/profile-format.md; this file is their one implementation.
 *
 * A profile is machine-written, so loading is strict: every key is
 * required, unknown keys are errors, and a failure names the file and the
 * position (line:column for syntax, the JSON path for content, e.g.
 * `prof.json: ops[12].uses[1].bytes: expected a non-negative integer, got
 * "x"`). The same invariant check (check_profile) runs before saving and
 * after loading, so a file this library saves is one it loads.
 *
 * 64-bit values: sizes, times, ids and memory are JSON integers limited to
 * 0 .. 2^53 - 1, which every JSON reader (also those that read numbers as
 * doubles) holds exactly. data_ptr and history are bit patterns that use
 * all 64 bits, so they are hex strings "0x" + 16 digits. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chameleon/profile.h"
#include "common/assert.h"
#include "common/message.h"
#include "common/grow.h"
#include "json/read.h"
#include "json/write.h"
#include "profile/profile-impl.h"

#define FORMAT_NAME "chameleon-profile"
#define FORMAT_VERSION 1
/* The shared reader, the names of phases and dtypes and the tensor use
 * object are in src/json/ (also used by src/policy/policy_json.c). */
#define MAX_EXACT CHAM_JSON_MAX_EXACT
#define MAX_OPS (UINT32_MAX / 2)
#define QUOTE_MAX CHAM_JSON_QUOTE_MAX
#define N_PHASES CHAM_JSON_N_PHASES
#define N_DTYPES CHAM_JSON_N_DTYPES


static const char *const swap_kind_names[] = {
    [CHAM_SWAP_OUT] = "out",
    [CHAM_SWAP_IN] = "in",
};
#define N_SWAP_KINDS (sizeof swap_kind_names / sizeof swap_kind_names[0])

/* The keys of each object, in the order they are written. */
static const char *const top_keys[] = {"format", "version", "step", "duration_ns",
                                       "capacity", "?kernel_overhead_ns", "?copy_latency_ns",
                                       "tokens", "ops", "swaps"};
static const char *const op_keys[] = {"token", "phase", "mem_before", "mem_after",
                                      "?cost_ns", "?comm_ns", "?comm_waited", "?recomputable",
                                      "?block", "uses"};
static const char *const swap_keys[] = {"kind", "storage", "bytes", "sample", "passive",
                                        "?recompute", "?carried"};
#define N_KEYS(a) (sizeof(a) / sizeof((a)[0]))


/* ---- the invariants -----------------------------------------------------------*/

/* True if s is UTF-8 as jansson accepts it: no overlong forms, no
 * surrogates, nothing above U+10FFFF. */
static bool utf8_valid(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        unsigned c = *u++;
        if (c < 0x80)
            continue;
        int more;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            more = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        for (int i = 0; i < more; i++) {
            if ((*u & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (*u++ & 0x3F);
        }
        if ((more == 2 && cp < 0x800) || (more == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
    }
    return true;
}

typedef struct named {
    const char *name;
    size_t index;
} named_t;

static int cmp_named(const void *a, const void *b)
{
    const named_t *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* Looks for two equal names: *found, with *first < *second the pair whose
 * repeat comes first. CHAM_ERR_HOST_OOM when the host is out of memory. */
static cham_status_t find_repeated_name(char *const *names, size_t n, bool *found,
                                        size_t *first, size_t *second)
{
    *found = false;
    if (n < 2)
        return CHAM_OK;
    named_t *v = malloc(n * sizeof *v);
    if (!v)
        return CHAM_ERR_HOST_OOM;
    for (size_t i = 0; i < n; i++)
        v[i] = (named_t){names[i], i};
    qsort(v, n, sizeof *v, cmp_named);
    for (size_t k = 1; k < n; k++) {
        if (strcmp(v[k - 1].name, v[k].name) == 0 && (!*found || v[k].index < *second)) {
            *found = true;
            *first = v[k - 1].index;
            *second = v[k].index;
        }
    }
    free(v);
    return CHAM_OK;
}

/* Checks what a file must satisfy beyond its types (docs/profile-format.md,
 * "Invariants"): on failure msg gets "JSON.PATH: what is wrong". */
static cham_status_t check_profile(const cham_profile_t *p, char *msg, size_t msg_size)
{
    if (p->op_open) {
        cham_set_err(msg, msg_size, "ops[%zu]: the op is still open (no end_op)", p->n_ops - 1);
        return CHAM_ERR_INVALID_ARG;
    }
    const struct {
        const char *key;
        uint64_t v;
    } top[] = {{"step", p->step}, {"duration_ns", p->duration_ns}, {"capacity", p->capacity},
               {"kernel_overhead_ns", p->kernel_overhead_ns},
               {"copy_latency_ns", p->copy_latency_ns}};
    for (size_t i = 0; i < N_KEYS(top); i++) {
        if (top[i].v > MAX_EXACT) {
            cham_set_err(msg, msg_size, "%s: %" PRIu64 " is above 2^53 - 1", top[i].key, top[i].v);
            return CHAM_ERR_INVALID_ARG;
        }
    }
    if (p->n_tokens > INT32_MAX) {
        cham_set_err(msg, msg_size, "tokens: %zu names, more than op tokens number", p->n_tokens);
        return CHAM_ERR_INVALID_ARG;
    }
    for (size_t t = 0; t < p->n_tokens; t++) {
        if (!p->token_names[t] || !utf8_valid(p->token_names[t])) {
            cham_set_err(msg, msg_size, "tokens[%zu]: not a valid UTF-8 string", t);
            return CHAM_ERR_INVALID_ARG;
        }
    }
    bool repeated;
    size_t t1 = 0, t2 = 0;
    if (find_repeated_name(p->token_names, p->n_tokens, &repeated, &t1, &t2) != CHAM_OK) {
        cham_set_err(msg, msg_size, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    if (repeated) {
        cham_set_err(msg, msg_size, "tokens[%zu]: \"%.*s\" repeats tokens[%zu] (names are unique)",
                t2, QUOTE_MAX, p->token_names[t2], t1);
        return CHAM_ERR_INVALID_ARG;
    }
    if (p->n_ops > MAX_OPS) {
        cham_set_err(msg, msg_size, "ops: %zu ops, more than %" PRIu32, p->n_ops, (uint32_t)MAX_OPS);
        return CHAM_ERR_INVALID_ARG;
    }
    size_t next_use = 0;
    for (size_t i = 0; i < p->n_ops; i++) {
        const cham_profile_op_t *op = &p->ops[i];
        if (op->token < 0 || (size_t)op->token >= p->n_tokens) {
            if (p->n_tokens == 0)
                cham_set_err(msg, msg_size, "ops[%zu].token: %" PRId32 " is out of range: "
                        "\"tokens\" is empty", i, op->token);
            else
                cham_set_err(msg, msg_size, "ops[%zu].token: %" PRId32 " is out of range: "
                        "\"tokens\" names tokens 0 .. %zu", i, op->token, p->n_tokens - 1);
            return CHAM_ERR_INVALID_ARG;
        }
        if ((int)op->phase < 0 || (size_t)op->phase >= N_PHASES) {
            cham_set_err(msg, msg_size, "ops[%zu].phase: unknown phase %d", i, (int)op->phase);
            return CHAM_ERR_INVALID_ARG;
        }
        if (op->mem_before > MAX_EXACT || op->mem_after > MAX_EXACT) {
            cham_set_err(msg, msg_size, "ops[%zu].%s: %" PRIu64 " is above 2^53 - 1", i,
                    op->mem_before > MAX_EXACT ? "mem_before" : "mem_after",
                    op->mem_before > MAX_EXACT ? op->mem_before : op->mem_after);
            return CHAM_ERR_INVALID_ARG;
        }
        /* The ops' use ranges tile uses[] in op order. */
        CHAM_ASSERT(op->first_use == next_use && op->n_uses <= p->n_uses - next_use);
        next_use += op->n_uses;
        for (uint32_t j = 0; j < op->n_uses; j++) {
            const cham_tensor_use_t *u = &p->uses[op->first_use + j];
            const char *big = u->storage > MAX_EXACT ? "storage"
                              : u->bytes > MAX_EXACT ? "bytes"
                              : u->storage_bytes > MAX_EXACT ? "storage_bytes" : NULL;
            if (big) {
                cham_set_err(msg, msg_size, "ops[%zu].uses[%" PRIu32 "].%s: above 2^53 - 1", i, j,
                        big);
                return CHAM_ERR_INVALID_ARG;
            }
            if ((int)u->dtype < 0 || (size_t)u->dtype >= N_DTYPES) {
                cham_set_err(msg, msg_size, "ops[%zu].uses[%" PRIu32 "].dtype: unknown dtype %d",
                        i, j, (int)u->dtype);
                return CHAM_ERR_INVALID_ARG;
            }
            if (u->bytes > u->storage_bytes) {
                cham_set_err(msg, msg_size, "ops[%zu].uses[%" PRIu32 "].bytes: %" PRIu64 " is more "
                        "than storage_bytes %" PRIu64 " (a view lies inside its storage)",
                        i, j, u->bytes, u->storage_bytes);
                return CHAM_ERR_INVALID_ARG;
            }
        }
    }
    CHAM_ASSERT(next_use == p->n_uses);
    uint64_t last_sample = 2 * (uint64_t)p->n_ops;
    for (size_t k = 0; k < p->n_swaps; k++) {
        const cham_profile_swap_t *s = &p->swaps[k];
        if ((int)s->kind < 0 || (size_t)s->kind >= N_SWAP_KINDS) {
            cham_set_err(msg, msg_size, "swaps[%zu].kind: unknown kind %d", k, (int)s->kind);
            return CHAM_ERR_INVALID_ARG;
        }
        if (s->storage > MAX_EXACT || s->bytes > MAX_EXACT) {
            cham_set_err(msg, msg_size, "swaps[%zu].%s: above 2^53 - 1", k,
                    s->storage > MAX_EXACT ? "storage" : "bytes");
            return CHAM_ERR_INVALID_ARG;
        }
        if (s->sample > last_sample) {
            cham_set_err(msg, msg_size, "swaps[%zu].sample: %" PRIu32 " is beyond the last sample, "
                    "2 * %zu ops = %" PRIu64, k, s->sample, p->n_ops, last_sample);
            return CHAM_ERR_INVALID_ARG;
        }
        if (s->carried && s->kind != CHAM_SWAP_IN) {
            cham_set_err(msg, msg_size, "swaps[%zu].carried: only a swap-in (\"in\") comes "
                         "back from before the step", k);
            return CHAM_ERR_INVALID_ARG;
        }
        if (k > 0 && s->sample < p->swaps[k - 1].sample) {
            cham_set_err(msg, msg_size, "swaps[%zu].sample: %" PRIu32 " is before swaps[%zu]'s %"
                    PRIu32 " (swaps are in the order they happened)", k, s->sample, k - 1,
                    p->swaps[k - 1].sample);
            return CHAM_ERR_INVALID_ARG;
        }
    }
    return CHAM_OK;
}

/* ---- saving -----------------------------------------------------------------------*/

static json_t *op_to_json(const cham_profile_t *p, const cham_profile_op_t *op)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_t *uses = NULL;
    /* cham_json_put and json_array_append_new take the value's reference
     * even when they fail. */
    bool ok = cham_json_put(o, "token", json_integer(op->token)) &&
              cham_json_put(o, "phase", json_string(cham_json_phase_names[op->phase])) &&
              cham_json_put(o, "mem_before", json_integer((json_int_t)op->mem_before)) &&
              cham_json_put(o, "mem_after", json_integer((json_int_t)op->mem_after)) &&
              (!op->has_cost || cham_json_put(o, "cost_ns", json_real(op->cost_ns))) &&
              (op->comm_ns <= 0 || cham_json_put(o, "comm_ns", json_real(op->comm_ns))) &&
              (!op->comm_waited || cham_json_put(o, "comm_waited", json_true())) &&
              (!op->recomputable || cham_json_put(o, "recomputable", json_true())) &&
              (op->block < 0 || cham_json_put(o, "block", json_integer(op->block))) &&
              cham_json_put(o, "uses", uses = json_array());
    for (uint32_t j = 0; ok && j < op->n_uses; j++) {
        const cham_tensor_use_t *u = &p->uses[op->first_use + j];
        json_t *uo = cham_json_use_to_json(u);
        ok = uo && json_array_append_new(uses, uo) == 0;
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *swap_to_json(const cham_profile_swap_t *s)
{
    json_t *o = json_object();
    bool ok = o && cham_json_put(o, "kind", json_string(swap_kind_names[s->kind])) &&
              cham_json_put(o, "storage", json_integer((json_int_t)s->storage)) &&
              cham_json_put(o, "bytes", json_integer((json_int_t)s->bytes)) &&
              cham_json_put(o, "sample", json_integer((json_int_t)s->sample)) &&
              cham_json_put(o, "passive", json_boolean(s->passive)) &&
              (!s->recompute || cham_json_put(o, "recompute", json_true())) &&
              (!s->carried || cham_json_put(o, "carried", json_true()));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The layout: top-level keys one per line, then one line per token, per
 * op (with its uses) and per swap, so a file reads and diffs line by line
 * and a line number points at an op. */
static bool write_profile(FILE *fp, const void *obj)
{
    const cham_profile_t *p = obj;
    fprintf(fp, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n", FORMAT_NAME, FORMAT_VERSION);
    fprintf(fp, "  \"step\": %" PRIu64 ",\n  \"duration_ns\": %" PRIu64 ",\n"
            "  \"capacity\": %" PRIu64 ",\n", p->step, p->duration_ns, p->capacity);
    if (p->kernel_overhead_ns)
        fprintf(fp, "  \"kernel_overhead_ns\": %" PRIu64 ",\n", p->kernel_overhead_ns);
    if (p->copy_latency_ns)
        fprintf(fp, "  \"copy_latency_ns\": %" PRIu64 ",\n", p->copy_latency_ns);
    fputs(p->n_tokens ? "  \"tokens\": [\n" : "  \"tokens\": [", fp);
    for (size_t t = 0; t < p->n_tokens; t++) {
        if (!cham_json_write_value(fp, json_string(p->token_names[t]), t + 1 == p->n_tokens))
            return false;
    }
    fputs(p->n_tokens ? "  ],\n" : "],\n", fp);
    fputs(p->n_ops ? "  \"ops\": [\n" : "  \"ops\": [", fp);
    for (size_t i = 0; i < p->n_ops; i++) {
        if (!cham_json_write_value(fp, op_to_json(p, &p->ops[i]), i + 1 == p->n_ops))
            return false;
    }
    fputs(p->n_ops ? "  ],\n" : "],\n", fp);
    fputs(p->n_swaps ? "  \"swaps\": [\n" : "  \"swaps\": [", fp);
    for (size_t k = 0; k < p->n_swaps; k++) {
        if (!cham_json_write_value(fp, swap_to_json(&p->swaps[k]), k + 1 == p->n_swaps))
            return false;
    }
    fputs(p->n_swaps ? "  ]\n}\n" : "]\n}\n", fp);
    return !ferror(fp);
}

cham_status_t cham_profile_save_json(const cham_profile_t *p, const char *path, char *err,
                                     size_t err_size)
{
    CHAM_ASSERT(p && path);
    cham_set_err(err, err_size, "%s", "");
    char why[256];
    cham_status_t st = check_profile(p, why, sizeof why);
    if (st != CHAM_OK) {
        cham_set_err(err, err_size, "%s: cannot save: %s", path, why);
        return st;
    }
    return cham_json_save_file(path, write_profile, p, err, err_size);
}

/* ---- loading ----------------------------------------------------------------------*/

static bool read_tokens(cham_json_reader_t *r, const json_t *root, cham_profile_t *p)
{
    size_t mark;
    const json_t *a = cham_json_read_array(r, root, "tokens", &mark);
    if (!a)
        return false;
    size_t n = json_array_size(a);
    if (n > INT32_MAX) {
        cham_json_fail(r, CHAM_ERR_INVALID_ARG, "%zu names, more than op tokens number", n);
        cham_json_pop(r, mark);
        return false;
    }
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names) {
        cham_json_pop(r, mark);
        return cham_json_fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
    }
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        const json_t *v = json_array_get(a, i);
        names[i] = json_string_value(v);
        if (!names[i]) {
            size_t m = cham_json_push_index(r, i);
            ok = cham_json_fail_got(r, "an op name (a string)", v);
            cham_json_pop(r, m);
        }
    }
    cham_json_pop(r, mark);
    if (ok && !cham_profile_set_tokens(p, names, n))
        ok = cham_json_fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
    free(names);
    return ok;
}

/* An optional time in ns (key absent: *out untouched, true). */
static bool read_ns(cham_json_reader_t *r, const json_t *v, const char *key, double *out)
{
    if (!json_object_get(v, key))
        return true;
    if (!cham_json_read_number(r, v, key, out))
        return false;
    if (cham_profile_time_ok(*out))
        return true;
    size_t m = cham_json_push_key(r, key);
    cham_json_fail(r, CHAM_ERR_INVALID_ARG, "%g is not a time in ns", *out);
    cham_json_pop(r, m);
    return false;
}

static bool read_op(cham_json_reader_t *r, const json_t *v, cham_profile_t *p)
{
    if (!cham_json_check_object(r, v, "an op (an object)", op_keys, N_KEYS(op_keys)))
        return false;
    uint32_t token = 0;
    int phase = 0;
    cham_profile_op_t op = {0};
    if (!cham_json_read_u32(r, v, "token", INT32_MAX, &token) ||
        !cham_json_read_name(r, v, "phase", "phase", cham_json_phase_names, N_PHASES, &phase) ||
        !cham_json_read_u53(r, v, "mem_before", &op.mem_before) ||
        !cham_json_read_u53(r, v, "mem_after", &op.mem_after))
        return false;
    op.token = (cham_op_token_t)token;
    op.phase = (cham_phase_t)phase;
    op.has_cost = json_object_get(v, "cost_ns") != NULL;
    if (!read_ns(r, v, "cost_ns", &op.cost_ns) || !read_ns(r, v, "comm_ns", &op.comm_ns) ||
        (json_object_get(v, "comm_waited") &&
         !cham_json_read_bool(r, v, "comm_waited", &op.comm_waited)))
        return false;
    if (op.comm_waited && op.comm_ns <= 0) {
        size_t m = cham_json_push_key(r, "comm_waited");
        cham_json_fail(r, CHAM_ERR_INVALID_ARG, "true, but the op has no comm_ns > 0 to wait for");
        cham_json_pop(r, m);
        return false;
    }
    if (json_object_get(v, "recomputable") &&
        !cham_json_read_bool(r, v, "recomputable", &op.recomputable))
        return false;
    op.block = -1;
    if (json_object_get(v, "block")) {
        uint32_t block;
        if (!cham_json_read_u32(r, v, "block", INT32_MAX, &block))
            return false;
        op.block = (int32_t)block;
    }
    op.first_use = (uint32_t)p->n_uses;

    size_t mark;
    const json_t *a = cham_json_read_array(r, v, "uses", &mark);
    if (!a)
        return false;
    size_t n = json_array_size(a);
    bool ok = true;
    if (n > UINT32_MAX - p->n_uses)
        ok = cham_json_fail(r, CHAM_ERR_INVALID_ARG, "more than %" PRIu32 " uses in the profile",
                  UINT32_MAX);
    if (ok) {
        cham_tensor_use_t *uses = cham_grow(p->uses, &p->cap_uses, p->n_uses + n,
                                            sizeof *uses, 64);
        if (!uses)
            ok = cham_json_fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
        else
            p->uses = uses;
    }
    for (size_t j = 0; ok && j < n; j++) {
        size_t m = cham_json_push_index(r, j);
        cham_tensor_use_t u = {0};
        ok = cham_json_read_use(r, json_array_get(a, j), &u);
        if (ok)
            p->uses[p->n_uses++] = u;
        cham_json_pop(r, m);
    }
    cham_json_pop(r, mark);
    if (!ok)
        return false;
    op.n_uses = (uint32_t)n;
    p->ops[p->n_ops++] = op;
    return true;
}

static bool read_ops(cham_json_reader_t *r, const json_t *root, cham_profile_t *p)
{
    size_t mark;
    const json_t *a = cham_json_read_array(r, root, "ops", &mark);
    if (!a)
        return false;
    size_t n = json_array_size(a);
    bool ok = true;
    if (n > MAX_OPS)
        ok = cham_json_fail(r, CHAM_ERR_INVALID_ARG, "%zu ops, more than %" PRIu32, n,
                            (uint32_t)MAX_OPS);
    if (ok && n > 0) {
        p->ops = calloc(n, sizeof *p->ops);
        p->cap_ops = p->ops ? n : 0;
        if (!p->ops)
            ok = cham_json_fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
    }
    for (size_t i = 0; ok && i < n; i++) {
        size_t m = cham_json_push_index(r, i);
        ok = read_op(r, json_array_get(a, i), p);
        cham_json_pop(r, m);
    }
    cham_json_pop(r, mark);
    return ok;
}

static bool read_swap(cham_json_reader_t *r, const json_t *v, cham_profile_swap_t *s)
{
    if (!cham_json_check_object(r, v, "a swap (an object)", swap_keys, N_KEYS(swap_keys)))
        return false;
    int kind = 0;
    bool ok = cham_json_read_name(r, v, "kind", "swap kind", swap_kind_names, N_SWAP_KINDS,
                                  &kind) &&
              cham_json_read_u53(r, v, "storage", &s->storage) &&
              cham_json_read_u53(r, v, "bytes", &s->bytes) &&
              cham_json_read_u32(r, v, "sample", UINT32_MAX, &s->sample) &&
              cham_json_read_bool(r, v, "passive", &s->passive) &&
              (!json_object_get(v, "recompute") ||
               cham_json_read_bool(r, v, "recompute", &s->recompute)) &&
              (!json_object_get(v, "carried") ||
               cham_json_read_bool(r, v, "carried", &s->carried));
    s->kind = (cham_swap_kind_t)kind;
    return ok;
}

static bool read_swaps(cham_json_reader_t *r, const json_t *root, cham_profile_t *p)
{
    size_t mark;
    const json_t *a = cham_json_read_array(r, root, "swaps", &mark);
    if (!a)
        return false;
    size_t n = json_array_size(a);
    bool ok = true;
    if (n > 0) {
        p->swaps = calloc(n, sizeof *p->swaps);
        p->cap_swaps = p->swaps ? n : 0;
        if (!p->swaps)
            ok = cham_json_fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
    }
    for (size_t k = 0; ok && k < n; k++) {
        size_t m = cham_json_push_index(r, k);
        cham_profile_swap_t s = {0};
        ok = read_swap(r, json_array_get(a, k), &s);
        if (ok)
            p->swaps[p->n_swaps++] = s;
        cham_json_pop(r, m);
    }
    cham_json_pop(r, mark);
    return ok;
}


static bool read_profile(cham_json_reader_t *r, const json_t *root, cham_profile_t **out)
{
    if (!json_is_object(root))
        return cham_json_fail_got(r, "a JSON object at the top level", root);
    if (!cham_json_read_header(r, root, "profile", FORMAT_NAME, FORMAT_VERSION) ||
        !cham_json_check_object(r, root, "an object", top_keys, N_KEYS(top_keys)))
        return false;
    uint64_t step = 0, capacity = 0, duration = 0;
    if (!cham_json_read_u53(r, root, "step", &step) ||
        !cham_json_read_u53(r, root, "duration_ns", &duration) ||
        !cham_json_read_u53(r, root, "capacity", &capacity))
        return false;
    cham_profile_t *p = cham_profile_new(step, capacity);
    if (!p)
        return cham_json_fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
    cham_profile_set_duration(p, duration);
    uint64_t overhead = 0, latency = 0;
    if ((json_object_get(root, "kernel_overhead_ns") &&
         !cham_json_read_u53(r, root, "kernel_overhead_ns", &overhead)) ||
        (json_object_get(root, "copy_latency_ns") &&
         !cham_json_read_u53(r, root, "copy_latency_ns", &latency))) {
        cham_profile_free(p);
        return false;
    }
    cham_profile_set_fixed_costs(p, overhead, latency);
    if (!read_tokens(r, root, p) || !read_ops(r, root, p) || !read_swaps(r, root, p)) {
        cham_profile_free(p);
        return false;
    }
    char why[256];
    cham_status_t st = check_profile(p, why, sizeof why);
    if (st != CHAM_OK) {
        cham_profile_free(p);
        return cham_json_fail(r, st, "%s", why);
    }
    *out = p;
    return true;
}

cham_status_t cham_profile_load_json(const char *path, cham_profile_t **out, char *err,
                                     size_t err_size)
{
    CHAM_ASSERT(path && out);
    *out = NULL;
    cham_set_err(err, err_size, "%s", "");
    cham_json_reader_t r = {.file = path, .err = err, .err_size = err_size, .status = CHAM_OK};
    json_t *root = cham_json_parse_file(&r, "a chameleon profile");
    if (!root)
        return r.status;
    read_profile(&r, root, out);
    json_decref(root);
    return r.status;
}
