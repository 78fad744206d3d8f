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
#include "profile/profile-impl.h"

#define FORMAT_NAME "chameleon-profile"
#define FORMAT_VERSION 1
/* Largest integer stored as a JSON number: exact in a double. */
#define MAX_EXACT ((UINT64_C(1) << 53) - 1)
#define MAX_OPS (UINT32_MAX / 2)
/* Strings quoted in messages are cut to this many characters. */
#define QUOTE_MAX 40

/* Names in the file. Kept here rather than taken from cham_phase_name and
 * cham_dtype_name (src/runtime/names.c) so that the file format depends on
 * nothing outside this module and cannot change when log names do. Indexed
 * by cham_phase_t and cham_dtype_t. */
static const char *const phase_names[] = {
    [CHAM_PHASE_FORWARD] = "forward",
    [CHAM_PHASE_BACKWARD] = "backward",
    [CHAM_PHASE_OPTIMIZER] = "optimizer",
    [CHAM_PHASE_OTHER] = "other",
};
#define N_PHASES (sizeof phase_names / sizeof phase_names[0])
_Static_assert(N_PHASES == CHAM_PHASE_OTHER + 1, "a name for every phase");

static const char *const dtype_names[] = {
    [CHAM_DTYPE_F32] = "f32", [CHAM_DTYPE_F16] = "f16", [CHAM_DTYPE_BF16] = "bf16",
    [CHAM_DTYPE_F64] = "f64", [CHAM_DTYPE_I64] = "i64", [CHAM_DTYPE_I32] = "i32",
    [CHAM_DTYPE_I8] = "i8",   [CHAM_DTYPE_U8] = "u8",   [CHAM_DTYPE_BOOL] = "bool",
};
#define N_DTYPES (sizeof dtype_names / sizeof dtype_names[0])
_Static_assert(N_DTYPES == CHAM_DTYPE_COUNT_, "a name for every dtype");

static const char *const swap_kind_names[] = {
    [CHAM_SWAP_OUT] = "out",
    [CHAM_SWAP_IN] = "in",
};
#define N_SWAP_KINDS (sizeof swap_kind_names / sizeof swap_kind_names[0])

/* The keys of each object, in the order they are written. */
static const char *const top_keys[] = {"format", "version", "step", "duration_ns",
                                       "capacity", "tokens", "ops", "swaps"};
static const char *const op_keys[] = {"token", "phase", "mem_before", "mem_after", "uses"};
static const char *const use_keys[] = {"storage", "data_ptr", "bytes", "storage_bytes",
                                       "dtype", "use_count", "history", "output"};
static const char *const swap_keys[] = {"kind", "storage", "bytes", "sample", "passive"};
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
    } top[] = {{"step", p->step}, {"duration_ns", p->duration_ns}, {"capacity", p->capacity}};
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

/* A JSON string "0x" + 16 hex digits; NULL when out of host memory. */
static json_t *hex64(uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
    return json_string(buf);
}

/* Adds value under key; a NULL value (out of memory) makes it fail. */
static bool put(json_t *obj, const char *key, json_t *value)
{
    return value && json_object_set_new(obj, key, value) == 0;
}

static json_t *op_to_json(const cham_profile_t *p, const cham_profile_op_t *op)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_t *uses = NULL;
    /* put and json_array_append_new take the value's reference even when
     * they fail, so only a use object not yet handed over is ours to drop. */
    bool ok = put(o, "token", json_integer(op->token)) &&
              put(o, "phase", json_string(phase_names[op->phase])) &&
              put(o, "mem_before", json_integer((json_int_t)op->mem_before)) &&
              put(o, "mem_after", json_integer((json_int_t)op->mem_after)) &&
              put(o, "uses", uses = json_array());
    for (uint32_t j = 0; ok && j < op->n_uses; j++) {
        const cham_tensor_use_t *u = &p->uses[op->first_use + j];
        json_t *uo = json_object();
        ok = uo && put(uo, "storage", json_integer((json_int_t)u->storage)) &&
             put(uo, "data_ptr", hex64(u->data_ptr)) &&
             put(uo, "bytes", json_integer((json_int_t)u->bytes)) &&
             put(uo, "storage_bytes", json_integer((json_int_t)u->storage_bytes)) &&
             put(uo, "dtype", json_string(dtype_names[u->dtype])) &&
             put(uo, "use_count", json_integer((json_int_t)u->use_count)) &&
             put(uo, "history", hex64(u->history)) &&
             put(uo, "output", json_boolean(u->output));
        if (!ok)
            json_decref(uo);
        else
            ok = json_array_append_new(uses, uo) == 0;
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
    bool ok = o && put(o, "kind", json_string(swap_kind_names[s->kind])) &&
              put(o, "storage", json_integer((json_int_t)s->storage)) &&
              put(o, "bytes", json_integer((json_int_t)s->bytes)) &&
              put(o, "sample", json_integer((json_int_t)s->sample)) &&
              put(o, "passive", json_boolean(s->passive));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Writes one array element per line; false when out of host memory or the
 * write failed (ferror tells which). */
static bool write_value(FILE *fp, json_t *v, bool last)
{
    if (!v)
        return false;
    fputs("    ", fp);
    int rc = json_dumpf(v, fp, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(v);
    fputs(last ? "\n" : ",\n", fp);
    return rc == 0 && !ferror(fp);
}

/* The layout: top-level keys one per line, then one line per token, per
 * op (with its uses) and per swap, so a file reads and diffs line by line
 * and a line number points at an op. */
static bool write_profile(FILE *fp, const cham_profile_t *p)
{
    fprintf(fp, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n", FORMAT_NAME, FORMAT_VERSION);
    fprintf(fp, "  \"step\": %" PRIu64 ",\n  \"duration_ns\": %" PRIu64 ",\n"
            "  \"capacity\": %" PRIu64 ",\n", p->step, p->duration_ns, p->capacity);
    fputs(p->n_tokens ? "  \"tokens\": [\n" : "  \"tokens\": [", fp);
    for (size_t t = 0; t < p->n_tokens; t++) {
        if (!write_value(fp, json_string(p->token_names[t]), t + 1 == p->n_tokens))
            return false;
    }
    fputs(p->n_tokens ? "  ],\n" : "],\n", fp);
    fputs(p->n_ops ? "  \"ops\": [\n" : "  \"ops\": [", fp);
    for (size_t i = 0; i < p->n_ops; i++) {
        if (!write_value(fp, op_to_json(p, &p->ops[i]), i + 1 == p->n_ops))
            return false;
    }
    fputs(p->n_ops ? "  ],\n" : "],\n", fp);
    fputs(p->n_swaps ? "  \"swaps\": [\n" : "  \"swaps\": [", fp);
    for (size_t k = 0; k < p->n_swaps; k++) {
        if (!write_value(fp, swap_to_json(&p->swaps[k]), k + 1 == p->n_swaps))
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
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        int e = errno;
        cham_set_err(err, err_size, "%s: cannot open for writing: %s", path, strerror(e));
        return e == ENOENT || e == ENOTDIR ? CHAM_ERR_NOT_FOUND : CHAM_ERR_INVALID_ARG;
    }
    errno = 0;
    bool ok = write_profile(fp, p);
    int e = errno;
    bool write_failed = ferror(fp) != 0;
    if (fclose(fp) != 0 && ok) {
        ok = false;
        write_failed = true;
        e = errno;
    }
    if (ok)
        return CHAM_OK;
    /* Leave no half-written profile behind. */
    remove(path);
    if (write_failed) {
        cham_set_err(err, err_size, "%s: cannot write: %s", path, strerror(e ? e : EIO));
        return CHAM_ERR_INVALID_ARG;
    }
    cham_set_err(err, err_size, "%s: out of host memory", path);
    return CHAM_ERR_HOST_OOM;
}

/* ---- loading ----------------------------------------------------------------------*/

/* The state of one load. path is the JSON path of the value being read
 * ("ops[12].uses[1].bytes"), grown and cut back as the reader descends. */
typedef struct reader {
    const char *file;
    char *err;
    size_t err_size;
    cham_status_t status;    /* CHAM_OK until the first failure */
    char path[128];
    size_t path_len;
} reader_t;

static size_t path_push_key(reader_t *r, const char *key)
{
    size_t mark = r->path_len;
    int w = snprintf(r->path + mark, sizeof r->path - mark, "%s%s", mark ? "." : "", key);
    r->path_len = w < 0 ? mark : mark + (size_t)w;
    if (r->path_len >= sizeof r->path)
        r->path_len = sizeof r->path - 1;
    return mark;
}

static size_t path_push_index(reader_t *r, size_t i)
{
    size_t mark = r->path_len;
    int w = snprintf(r->path + mark, sizeof r->path - mark, "[%zu]", i);
    r->path_len = w < 0 ? mark : mark + (size_t)w;
    if (r->path_len >= sizeof r->path)
        r->path_len = sizeof r->path - 1;
    return mark;
}

static void path_pop(reader_t *r, size_t mark)
{
    r->path_len = mark;
    r->path[mark] = '\0';
}

/* Records the first failure: "FILE: PATH: message" (no PATH at the top). */
CHAM_PRINTF(3, 4)
static bool fail(reader_t *r, cham_status_t status, const char *fmt, ...)
{
    if (r->status != CHAM_OK)
        return false;
    r->status = status;
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->path_len)
        cham_set_err(r->err, r->err_size, "%s: %s: %s", r->file, r->path, msg);
    else
        cham_set_err(r->err, r->err_size, "%s: %s", r->file, msg);
    return false;
}

/* v as it reads in a message: strings quoted and cut, containers named. */
static void describe(char *buf, size_t n, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: snprintf(buf, n, "an object"); break;
    case JSON_ARRAY: snprintf(buf, n, "an array"); break;
    case JSON_STRING: {
        char *s = json_dumps(v, JSON_ENCODE_ANY);
        if (!s) {
            snprintf(buf, n, "a string");
            break;
        }
        size_t len = strlen(s);
        if (len > QUOTE_MAX + 2)
            snprintf(buf, n, "%.*s...\"", QUOTE_MAX, s);
        else
            snprintf(buf, n, "%s", s);
        free(s);
        break;
    }
    case JSON_INTEGER: snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: snprintf(buf, n, "%.17g", json_real_value(v)); break;
    case JSON_TRUE: snprintf(buf, n, "true"); break;
    case JSON_FALSE: snprintf(buf, n, "false"); break;
    case JSON_NULL: snprintf(buf, n, "null"); break;
    }
}

static bool fail_got(reader_t *r, const char *expected, const json_t *v)
{
    char got[QUOTE_MAX + 16];
    describe(got, sizeof got, v);
    return fail(r, CHAM_ERR_INVALID_ARG, "expected %s, got %s", expected, got);
}

static bool in_list(const char *key, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(key, keys[i]) == 0)
            return true;
    }
    return false;
}

/* v must be an object with exactly keys (all required): unknown keys are
 * reported first, since a misspelt key is also a missing one. */
static bool check_object(reader_t *r, const json_t *v, const char *what,
                         const char *const *keys, size_t n_keys)
{
    if (!json_is_object(v))
        return fail_got(r, what, v);
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)v, key, value) {
        if (!in_list(key, keys, n_keys)) {
            char known[256];
            size_t used = 0;
            known[0] = '\0';
            for (size_t i = 0; i < n_keys && used + 1 < sizeof known; i++) {
                int w = snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                                 keys[i]);
                if (w < 0)
                    break;
                used += (size_t)w;
            }
            return fail(r, CHAM_ERR_INVALID_ARG, "unknown key \"%.*s\" (the keys are: %s)",
                        QUOTE_MAX, key, known);
        }
    }
    for (size_t i = 0; i < n_keys; i++) {
        if (!json_object_get(v, keys[i]))
            return fail(r, CHAM_ERR_INVALID_ARG, "missing key \"%s\"", keys[i]);
    }
    return true;
}

/* Field readers: each reads obj[key] (present: check_object ran) with
 * key on the path, so a failure names the field. */

static bool read_u53(reader_t *r, const json_t *obj, const char *key, uint64_t *out)
{
    size_t mark = path_push_key(r, key);
    const json_t *v = json_object_get(obj, key);
    bool ok = false;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        fail_got(r, "a non-negative integer", v);
    else if ((uint64_t)json_integer_value(v) > MAX_EXACT)
        fail(r, CHAM_ERR_INVALID_ARG, "%" JSON_INTEGER_FORMAT " is above 2^53 - 1, the "
             "largest integer the format stores", json_integer_value(v));
    else {
        *out = (uint64_t)json_integer_value(v);
        ok = true;
    }
    path_pop(r, mark);
    return ok;
}

static bool read_u32(reader_t *r, const json_t *obj, const char *key, uint64_t max,
                     uint32_t *out)
{
    size_t mark = path_push_key(r, key);
    const json_t *v = json_object_get(obj, key);
    bool ok = false;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        fail_got(r, "a non-negative integer", v);
    else if ((uint64_t)json_integer_value(v) > max)
        fail(r, CHAM_ERR_INVALID_ARG, "%" JSON_INTEGER_FORMAT " is too large (at most %"
             PRIu64 ")", json_integer_value(v), max);
    else {
        *out = (uint32_t)json_integer_value(v);
        ok = true;
    }
    path_pop(r, mark);
    return ok;
}

static bool read_hex64(reader_t *r, const json_t *obj, const char *key, uint64_t *out)
{
    size_t mark = path_push_key(r, key);
    const json_t *v = json_object_get(obj, key);
    const char *s = json_string_value(v);
    size_t len = s ? json_string_length(v) : 0;
    bool ok = s && len >= 3 && len <= 18 && s[0] == '0' && s[1] == 'x';
    uint64_t x = 0;
    for (size_t i = 2; ok && i < len; i++) {
        char c = s[i];
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        ok = d < 16;
        x = x << 4 | d;
    }
    if (ok)
        *out = x;
    else
        fail_got(r, "a hex string \"0x\" + 1 to 16 hex digits", v);
    path_pop(r, mark);
    return ok;
}

static bool read_bool(reader_t *r, const json_t *obj, const char *key, bool *out)
{
    size_t mark = path_push_key(r, key);
    const json_t *v = json_object_get(obj, key);
    bool ok = json_is_boolean(v);
    if (ok)
        *out = json_is_true(v);
    else
        fail_got(r, "true or false", v);
    path_pop(r, mark);
    return ok;
}

/* obj[key] must be one of names[0 .. n): *out gets its index. */
static bool read_name(reader_t *r, const json_t *obj, const char *key, const char *what,
                      const char *const *names, size_t n, int *out)
{
    size_t mark = path_push_key(r, key);
    const json_t *v = json_object_get(obj, key);
    bool ok = false;
    if (!json_is_string(v)) {
        char expected[64];
        snprintf(expected, sizeof expected, "a %s name (a string)", what);
        fail_got(r, expected, v);
    } else {
        for (size_t i = 0; i < n && !ok; i++) {
            if (strcmp(json_string_value(v), names[i]) == 0) {
                *out = (int)i;
                ok = true;
            }
        }
        if (!ok) {
            char list[160], got[QUOTE_MAX + 16];
            size_t used = 0;
            list[0] = '\0';
            for (size_t i = 0; i < n && used + 1 < sizeof list; i++) {
                int w = snprintf(list + used, sizeof list - used, "%s%s",
                                 i == 0 ? "" : i + 1 == n ? " or " : ", ", names[i]);
                if (w < 0)
                    break;
                used += (size_t)w;
            }
            describe(got, sizeof got, v);
            fail(r, CHAM_ERR_INVALID_ARG, "unknown %s %s (expected %s)", what, got, list);
        }
    }
    path_pop(r, mark);
    return ok;
}

/* obj[key] must be an array: returned, with key pushed on the path (the
 * caller pops mark), or NULL after a failure. */
static const json_t *read_array(reader_t *r, const json_t *obj, const char *key, size_t *mark)
{
    *mark = path_push_key(r, key);
    const json_t *v = json_object_get(obj, key);
    if (!json_is_array(v)) {
        fail_got(r, "an array", v);
        path_pop(r, *mark);
        return NULL;
    }
    return v;
}

static bool read_tokens(reader_t *r, const json_t *root, cham_profile_t *p)
{
    size_t mark;
    const json_t *a = read_array(r, root, "tokens", &mark);
    if (!a)
        return false;
    size_t n = json_array_size(a);
    if (n > INT32_MAX) {
        fail(r, CHAM_ERR_INVALID_ARG, "%zu names, more than op tokens number", n);
        path_pop(r, mark);
        return false;
    }
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names) {
        path_pop(r, mark);
        return fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
    }
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        const json_t *v = json_array_get(a, i);
        names[i] = json_string_value(v);
        if (!names[i]) {
            size_t m = path_push_index(r, i);
            ok = fail_got(r, "an op name (a string)", v);
            path_pop(r, m);
        }
    }
    path_pop(r, mark);
    if (ok && !cham_profile_set_tokens(p, names, n))
        ok = fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
    free(names);
    return ok;
}

static bool read_use(reader_t *r, const json_t *v, cham_tensor_use_t *u)
{
    if (!check_object(r, v, "a tensor use (an object)", use_keys, N_KEYS(use_keys)))
        return false;
    int dtype = 0;
    bool ok = read_u53(r, v, "storage", &u->storage) &&
              read_hex64(r, v, "data_ptr", &u->data_ptr) &&
              read_u53(r, v, "bytes", &u->bytes) &&
              read_u53(r, v, "storage_bytes", &u->storage_bytes) &&
              read_name(r, v, "dtype", "dtype", dtype_names, N_DTYPES, &dtype) &&
              read_u32(r, v, "use_count", UINT32_MAX, &u->use_count) &&
              read_hex64(r, v, "history", &u->history) &&
              read_bool(r, v, "output", &u->output);
    u->dtype = (cham_dtype_t)dtype;
    return ok;
}

static bool read_op(reader_t *r, const json_t *v, cham_profile_t *p)
{
    if (!check_object(r, v, "an op (an object)", op_keys, N_KEYS(op_keys)))
        return false;
    uint32_t token = 0;
    int phase = 0;
    cham_profile_op_t op = {0};
    if (!read_u32(r, v, "token", INT32_MAX, &token) ||
        !read_name(r, v, "phase", "phase", phase_names, N_PHASES, &phase) ||
        !read_u53(r, v, "mem_before", &op.mem_before) ||
        !read_u53(r, v, "mem_after", &op.mem_after))
        return false;
    op.token = (cham_op_token_t)token;
    op.phase = (cham_phase_t)phase;
    op.first_use = (uint32_t)p->n_uses;

    size_t mark;
    const json_t *a = read_array(r, v, "uses", &mark);
    if (!a)
        return false;
    size_t n = json_array_size(a);
    bool ok = true;
    if (n > UINT32_MAX - p->n_uses)
        ok = fail(r, CHAM_ERR_INVALID_ARG, "more than %" PRIu32 " uses in the profile",
                  UINT32_MAX);
    if (ok) {
        cham_tensor_use_t *uses = cham_grow(p->uses, &p->cap_uses, p->n_uses + n,
                                            sizeof *uses, 64);
        if (!uses)
            ok = fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
        else
            p->uses = uses;
    }
    for (size_t j = 0; ok && j < n; j++) {
        size_t m = path_push_index(r, j);
        cham_tensor_use_t u = {0};
        ok = read_use(r, json_array_get(a, j), &u);
        if (ok)
            p->uses[p->n_uses++] = u;
        path_pop(r, m);
    }
    path_pop(r, mark);
    if (!ok)
        return false;
    op.n_uses = (uint32_t)n;
    p->ops[p->n_ops++] = op;
    return true;
}

static bool read_ops(reader_t *r, const json_t *root, cham_profile_t *p)
{
    size_t mark;
    const json_t *a = read_array(r, root, "ops", &mark);
    if (!a)
        return false;
    size_t n = json_array_size(a);
    bool ok = true;
    if (n > MAX_OPS)
        ok = fail(r, CHAM_ERR_INVALID_ARG, "%zu ops, more than %" PRIu32, n, (uint32_t)MAX_OPS);
    if (ok && n > 0) {
        p->ops = calloc(n, sizeof *p->ops);
        p->cap_ops = p->ops ? n : 0;
        if (!p->ops)
            ok = fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
    }
    for (size_t i = 0; ok && i < n; i++) {
        size_t m = path_push_index(r, i);
        ok = read_op(r, json_array_get(a, i), p);
        path_pop(r, m);
    }
    path_pop(r, mark);
    return ok;
}

static bool read_swap(reader_t *r, const json_t *v, cham_profile_swap_t *s)
{
    if (!check_object(r, v, "a swap (an object)", swap_keys, N_KEYS(swap_keys)))
        return false;
    int kind = 0;
    bool ok = read_name(r, v, "kind", "swap kind", swap_kind_names, N_SWAP_KINDS, &kind) &&
              read_u53(r, v, "storage", &s->storage) && read_u53(r, v, "bytes", &s->bytes) &&
              read_u32(r, v, "sample", UINT32_MAX, &s->sample) &&
              read_bool(r, v, "passive", &s->passive);
    s->kind = (cham_swap_kind_t)kind;
    return ok;
}

static bool read_swaps(reader_t *r, const json_t *root, cham_profile_t *p)
{
    size_t mark;
    const json_t *a = read_array(r, root, "swaps", &mark);
    if (!a)
        return false;
    size_t n = json_array_size(a);
    bool ok = true;
    if (n > 0) {
        p->swaps = calloc(n, sizeof *p->swaps);
        p->cap_swaps = p->swaps ? n : 0;
        if (!p->swaps)
            ok = fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
    }
    for (size_t k = 0; ok && k < n; k++) {
        size_t m = path_push_index(r, k);
        cham_profile_swap_t s = {0};
        ok = read_swap(r, json_array_get(a, k), &s);
        if (ok)
            p->swaps[p->n_swaps++] = s;
        path_pop(r, m);
    }
    path_pop(r, mark);
    return ok;
}

/* "format" and "version" come first, so that another kind of file, or a
 * newer profile, is named as such rather than by its first odd key. */
static bool read_header(reader_t *r, const json_t *root)
{
    const json_t *format = json_object_get(root, "format");
    if (!format)
        return fail(r, CHAM_ERR_INVALID_ARG, "not a chameleon profile: no \"format\" key");
    if (!json_is_string(format) || strcmp(json_string_value(format), FORMAT_NAME) != 0) {
        char got[QUOTE_MAX + 16];
        describe(got, sizeof got, format);
        return fail(r, CHAM_ERR_INVALID_ARG, "not a chameleon profile: \"format\" is %s, "
                    "expected \"" FORMAT_NAME "\"", got);
    }
    const json_t *version = json_object_get(root, "version");
    if (!version)
        return fail(r, CHAM_ERR_INVALID_ARG, "missing key \"version\"");
    size_t mark = path_push_key(r, "version");
    bool ok = true;
    if (!json_is_integer(version) || json_integer_value(version) < 1)
        ok = fail_got(r, "a positive integer", version);
    path_pop(r, mark);
    if (ok && json_integer_value(version) != FORMAT_VERSION)
        ok = fail(r, CHAM_ERR_UNSUPPORTED, "profile format version %" JSON_INTEGER_FORMAT
                  " is newer than this library reads (version %d)",
                  json_integer_value(version), FORMAT_VERSION);
    return ok;
}

static bool read_profile(reader_t *r, const json_t *root, cham_profile_t **out)
{
    if (!json_is_object(root))
        return fail_got(r, "a JSON object at the top level", root);
    if (!read_header(r, root) ||
        !check_object(r, root, "an object", top_keys, N_KEYS(top_keys)))
        return false;
    uint64_t step = 0, capacity = 0, duration = 0;
    if (!read_u53(r, root, "step", &step) || !read_u53(r, root, "duration_ns", &duration) ||
        !read_u53(r, root, "capacity", &capacity))
        return false;
    cham_profile_t *p = cham_profile_new(step, capacity);
    if (!p)
        return fail(r, CHAM_ERR_HOST_OOM, "out of host memory");
    cham_profile_set_duration(p, duration);
    if (!read_tokens(r, root, p) || !read_ops(r, root, p) || !read_swaps(r, root, p)) {
        cham_profile_free(p);
        return false;
    }
    char why[256];
    cham_status_t st = check_profile(p, why, sizeof why);
    if (st != CHAM_OK) {
        cham_profile_free(p);
        return fail(r, st, "%s", why);
    }
    *out = p;
    return true;
}

/* Reads the whole file into *out (NUL-terminated, *len bytes before it). */
static cham_status_t read_file(reader_t *r, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    FILE *fp = fopen(r->file, "rb");
    if (!fp) {
        int e = errno;
        fail(r, e == ENOENT || e == ENOTDIR ? CHAM_ERR_NOT_FOUND : CHAM_ERR_INVALID_ARG,
             "cannot open: %s", strerror(e));
        return r->status;
    }
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        char *grown = cham_grow(buf, &cap, n + 65536 + 1, 1, 65536);
        if (!grown) {
            free(buf);
            fclose(fp);
            fail(r, CHAM_ERR_HOST_OOM, "out of host memory reading the file");
            return r->status;
        }
        buf = grown;
        errno = 0;
        size_t got = fread(buf + n, 1, cap - n - 1, fp);
        n += got;
        if (got == 0) {
            if (ferror(fp)) {
                int e = errno ? errno : EIO;
                free(buf);
                fclose(fp);
                fail(r, CHAM_ERR_INVALID_ARG, "cannot read: %s", strerror(e));
                return r->status;
            }
            break;
        }
    }
    fclose(fp);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return CHAM_OK;
}

cham_status_t cham_profile_load_json(const char *path, cham_profile_t **out, char *err,
                                     size_t err_size)
{
    CHAM_ASSERT(path && out);
    *out = NULL;
    cham_set_err(err, err_size, "%s", "");
    reader_t r = {.file = path, .err = err, .err_size = err_size, .status = CHAM_OK};
    char *text;
    size_t len;
    if (read_file(&r, &text, &len) != CHAM_OK)
        return r.status;

    bool blank = true;
    for (size_t i = 0; i < len && blank; i++)
        blank = text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r';
    if (blank) {
        free(text);
        fail(&r, CHAM_ERR_INVALID_ARG, "empty file (expected a chameleon profile: a JSON "
             "object)");
        return r.status;
    }

    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    free(text);
    /* jansson leaves the message empty when it cannot even set up its
     * lexer, which only an allocation failure does. */
    if (!root && (json_error_code(&jerr) == json_error_out_of_memory || !jerr.text[0])) {
        r.status = CHAM_ERR_HOST_OOM;
        cham_set_err(err, err_size, "%s: out of host memory parsing the file", path);
        return r.status;
    }
    if (!root) {
        bool truncated = json_error_code(&jerr) == json_error_premature_end_of_input;
        int line = jerr.line > 0 ? jerr.line : 1, col = jerr.column > 0 ? jerr.column : 1;
        r.status = CHAM_ERR_INVALID_ARG;
        cham_set_err(err, err_size, "%s:%d:%d: %s: %s", path, line, col,
                truncated ? "unexpected end of file (truncated?)" : "syntax error", jerr.text);
        return r.status;
    }
    read_profile(&r, root, out);
    json_decref(root);
    return r.status;
}
