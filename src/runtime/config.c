/* The runtime configuration: its defaults, its JSON file and its checks.
 *
 * Every field is described once, in the table `fields` below: its JSON key,
 * its path in cham_config_t, its kind and its range. cham_config_load_json
 * and cham_config_validate both check values against that table, so a value
 * refused in a file is refused in code with the same range in the message.
 * docs/config.md lists the keys, their ranges and the message style. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chameleon/runtime.h"
#include "common/assert.h"
#include "common/closest.h"
#include "common/file.h"
#include "common/message.h"
#include "common/size.h"
#include "policy/registry.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define TiB (UINT64_C(1) << 40)

/* Strings and keys quoted in messages are cut to this many characters. */
#define QUOTE_MAX 48

cham_config_t cham_config_default(void)
{
    cham_config_t c;
    memset(&c, 0, sizeof c);
    c.device = cham_device_config_default();
    c.mode = CHAM_MODE_MANAGED;
    c.pinned_budget = 16 * GiB;
    c.warmup_steps = 2;
    c.genpolicy_steps = 5;
    c.length_tolerance = 0.05;
    c.cosine_threshold = 0.95;
    c.score_c = 1.0;
    c.allocator_shift = CHAM_ALLOCATOR_SHIFT_AUTO;
    c.min_swap_bytes = 0;         /* from the budget: cham_context_min_swap */
    c.executor = true;
    c.oom_handling = true;
    c.recompute = true;
    c.model_state = true;
    c.policy_cache = 8;
    c.class_trials = 2;
    c.profiler = true;
    cham_planner_set_defaults(&c);    /* swapadvisor's, hyperoffload's options */
    return c;
}

/* ---- the field table --------------------------------------------------------*/

typedef enum kind {
    K_BACKEND,       /* const char *: "sim" or "cuda" (a literal) */
    K_PRESET,        /* const char *: a preset's own name, or NULL */
    K_MODE,          /* cham_mode_t */
    K_PLANNER,       /* cham_planner_kind_t */
    K_ALLOCATOR,     /* cham_allocator_mode_t */
    K_BOOL,          /* bool */
    K_INT,           /* int, integer range */
    K_U32,           /* uint32_t, integer range */
    K_SHIFT,         /* uint32_t, integer range or "auto" (CHAM_ALLOCATOR_SHIFT_AUTO) */
    K_U64,           /* uint64_t, integer range */
    K_SIZE,          /* uint64_t bytes: integer or "64GiB"; integer range */
    K_REAL,          /* double, real range */
} kind_t;

/* One config field. Integer kinds use [imin, imax]; K_REAL uses lo and hi,
 * each end open or closed, and zero_ok admits 0 outside [lo, hi] (0 = the
 * preset's or the default). range names the admitted values in messages. */
typedef struct field {
    const char *key;         /* JSON key */
    const char *name;        /* path in cham_config_t, for cham_config_validate */
    kind_t kind;
    size_t offset;
    uint64_t imin, imax;
    double lo, hi;
    bool lo_open, hi_open, zero_ok;
    const char *range;
} field_t;

#define OFF(member) offsetof(cham_config_t, member)
#define INTF(key, member, kind, lo, hi, text) \
    {key, #member, kind, OFF(member), lo, hi, 0, 0, false, false, false, text}
#define REALF(key, member, lo, hi, lo_open, hi_open, zero_ok, text) \
    {key, #member, K_REAL, OFF(member), 0, 0, lo, hi, lo_open, hi_open, zero_ok, text}
#define PLAINF(key, member, kind) \
    {key, #member, kind, OFF(member), 0, 0, 0, 0, false, false, false, NULL}

#define BANDWIDTH(key, member) \
    REALF(key, member, 1e3, 1e15, false, false, true, \
          "0 (the preset's) or [1e3, 1e15] bytes/s")
#define FLOPS(key, member) \
    REALF(key, member, 1e6, 1e18, false, false, true, \
          "0 (the preset's) or [1e6, 1e18] FLOP/s")
#define EFFICIENCY(key, member) \
    REALF(key, member, 0, 1, true, false, true, "0 (the preset's) or (0, 1]")
#define NANOS(key, member) \
    INTF(key, member, K_U64, 0, UINT64_C(1000000000000), \
         "[0, 1e12] ns (0 = the sim's default)")

static const field_t fields[] = {
    PLAINF("backend", device.backend, K_BACKEND),
    PLAINF("preset", device.preset, K_PRESET),
    INTF("ordinal", device.ordinal, K_INT, 0, 1023, "[0, 1023]"),
    INTF("capacity", device.capacity, K_SIZE, 0, 64 * TiB,
         "[0, 64TiB] bytes (0 = the preset's)"),
    FLOPS("peak_flops", device.peak_flops),
    BANDWIDTH("hbm_bandwidth", device.hbm_bandwidth),
    BANDWIDTH("h2d_bandwidth", device.h2d_bandwidth),
    BANDWIDTH("d2h_bandwidth", device.d2h_bandwidth),
    BANDWIDTH("p2p_bandwidth", device.p2p_bandwidth),
    FLOPS("host_flops", device.host_flops),
    BANDWIDTH("host_mem_bandwidth", device.host_mem_bandwidth),
    EFFICIENCY("flops_efficiency", device.flops_efficiency),
    EFFICIENCY("hbm_efficiency", device.hbm_efficiency),
    NANOS("launch_ns", device.launch_ns),
    NANOS("kernel_overhead_ns", device.kernel_overhead_ns),
    NANOS("copy_latency_ns", device.copy_latency_ns),
    NANOS("event_query_ns", device.event_query_ns),
    INTF("queue_depth", device.queue_depth, K_U32, 0, 1000000,
         "[0, 1000000] (0 = the sim's default)"),
    PLAINF("data", device.data, K_BOOL),
    PLAINF("hazard_check", device.hazard_check, K_BOOL),
    INTF("vm_granularity", device.vm_granularity, K_SIZE, 0, 1 * GiB,
         "0 (2 MiB) or a power of two up to 1GiB bytes"),
    PLAINF("mode", mode, K_MODE),
    INTF("advise_ahead", advise_ahead, K_U32, 0, 1000, "[0, 1000] ops"),
    INTF("pinned_budget", pinned_budget, K_SIZE, 1, UINT64_MAX, "(0, 16EiB) bytes"),
    INTF("allocator_shift", allocator_shift, K_SHIFT, 0, 10, "\"auto\" or [0, 10]"),
    PLAINF("allocator", allocator, K_ALLOCATOR),
    INTF("warmup_steps", warmup_steps, K_U32, 0, 1000000, "[0, 1000000]"),
    /* 0 would reach Stable with no step to try a policy in: never a plan. */
    INTF("genpolicy_steps", genpolicy_steps, K_U32, 1, 1000000, "[1, 1000000]"),
    REALF("length_tolerance", length_tolerance, 0, 1, false, true, false, "[0, 1)"),
    REALF("cosine_threshold", cosine_threshold, 0, 1, true, false, false, "(0, 1]"),
    REALF("score_c", score_c, 0, 1e6, false, false, false, "[0, 1e6]"),
    INTF("min_swap_bytes", min_swap_bytes, K_SIZE, 0, UINT64_MAX, "[0, 16EiB) bytes"),
    PLAINF("executor", executor, K_BOOL),
    INTF("memory_budget", memory_budget, K_SIZE, 0, 64 * TiB,
         "[0, 64TiB] bytes (0 = the device's capacity)"),
    PLAINF("oom_handling", oom_handling, K_BOOL),
    PLAINF("pytorch_record_stream", pytorch_record_stream, K_BOOL),
    INTF("policy_cache", policy_cache, K_U32, 0, 1024, "[0, 1024] classes"),
    INTF("class_trials", class_trials, K_U32, 1, 1000, "[1, 1000] trials"),
    PLAINF("planner", planner, K_PLANNER),
    PLAINF("profiler", profiler, K_BOOL),
    PLAINF("recompute", recompute, K_BOOL),
    PLAINF("model_state", model_state, K_BOOL),
};

#define N_FIELDS (sizeof fields / sizeof fields[0])

static const kind_t key_kinds[] = {
    [CHAM_PLANNER_KEY_BOOL] = K_BOOL, [CHAM_PLANNER_KEY_U32] = K_U32,
    [CHAM_PLANNER_KEY_U64] = K_U64, [CHAM_PLANNER_KEY_REAL] = K_REAL,
};

/* The i-th config field, into *f: the fields above, then each planner's
 * keys (policy/registry.c); false past the last. */
static bool field_at(size_t i, field_t *f)
{
    if (i < N_FIELDS) {
        *f = fields[i];
        return true;
    }
    i -= N_FIELDS;
    for (size_t p = 0; p < cham_n_planners; p++) {
        if (i < cham_planners[p].n_keys) {
            const cham_planner_key_t *k = &cham_planners[p].keys[i];
            *f = (field_t){k->key, k->member, key_kinds[k->kind], k->offset, k->imin, k->imax,
                           k->lo, k->hi, k->lo_open, false, false, k->range};
            return true;
        }
        i -= cham_planners[p].n_keys;
    }
    return false;
}

static void *field_ptr(cham_config_t *c, const field_t *f)
{
    return (char *)c + f->offset;
}

static const void *field_cptr(const cham_config_t *c, const field_t *f)
{
    return (const char *)c + f->offset;
}

/* ---- messages ---------------------------------------------------------------*/


/* The shortest %g form that reads back as v. */
static void format_double(char *buf, size_t n, double v)
{
    if (isnan(v)) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, n, v < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

/* s as a JSON string (quoted, escaped), cut to QUOTE_MAX characters. */
static void quote(char *buf, size_t n, const char *s)
{
    json_t *str = json_string(s);
    char *dumped = str ? json_dumps(str, JSON_ENCODE_ANY) : NULL;
    json_decref(str);
    if (!dumped) {
        snprintf(buf, n, "\"?\"");
        return;
    }
    size_t len = strlen(dumped);
    if (len > QUOTE_MAX + 2) {
        size_t cut = QUOTE_MAX; /* not inside a UTF-8 sequence */
        while (cut > 1 && ((unsigned char)dumped[cut] & 0xC0) == 0x80)
            cut--;
        snprintf(buf, n, "%.*s...\"", (int)cut, dumped);
    } else
        snprintf(buf, n, "%s", dumped);
    free(dumped);
}

/* A JSON value as the file wrote it, for "got ..." and "... is out of range". */
static void describe(char *buf, size_t n, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: snprintf(buf, n, "an object"); break;
    case JSON_ARRAY: snprintf(buf, n, "an array"); break;
    case JSON_STRING: quote(buf, n, json_string_value(v)); break;
    case JSON_INTEGER: snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: format_double(buf, n, json_real_value(v)); break;
    case JSON_TRUE: snprintf(buf, n, "true"); break;
    case JSON_FALSE: snprintf(buf, n, "false"); break;
    case JSON_NULL: snprintf(buf, n, "null"); break;
    }
}

static void list_presets(char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < cham_preset_count() && used + 1 < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%s", i ? ", " : "",
                         cham_preset_at(i)->name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* ---- range checks shared by the file and validate ---------------------------*/

static bool int_in_range(const field_t *f, uint64_t v)
{
    return v >= f->imin && v <= f->imax;
}

static bool real_in_range(const field_t *f, double v)
{
    if (f->zero_ok && v == 0)
        return true;
    bool lo_ok = f->lo_open ? v > f->lo : v >= f->lo;
    bool hi_ok = f->hi_open ? v < f->hi : v <= f->hi;
    return lo_ok && hi_ok; /* false for NaN */
}

static bool backend_known(const char *s)
{
    return strcmp(s, "sim") == 0 || strcmp(s, "cuda") == 0;
}

/* ---- byte sizes -------------------------------------------------------------*/

/* Byte sizes in a config file follow the one rule set of common/size.h
 * (docs/config.md, "Value types"). */
static bool parse_size(const char *s, uint64_t *out, char *why, size_t why_size)
{
    return cham_size_parse(s, out, NULL, why, why_size);
}

/* ---- one JSON value into one field ---------------------------------------------*/

/* Reads an integer-valued JSON number (an integer, or a real with no
 * fraction) as a uint64. Returns 1 on success, 0 when the value is not such
 * a number, -1 when it is one but negative or beyond 64 bits. */
static int json_to_u64(const json_t *v, uint64_t *out)
{
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0)
            return -1;
        *out = (uint64_t)i;
        return 1;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!isfinite(d) || d != floor(d))
            return 0;
        if (d < 0 || d >= 18446744073709551616.0)
            return -1;
        *out = (uint64_t)d;
        return 1;
    }
    return 0;
}

/* Sets field f of c from v. On failure writes the reason (which quotes the
 * value) to why and returns the status. */
static cham_status_t apply(cham_config_t *c, const field_t *f, const json_t *v, char *why,
                           size_t why_size)
{
    char got[QUOTE_MAX + 16];
    describe(got, sizeof got, v);
    void *dst = field_ptr(c, f);

    switch (f->kind) {
    case K_BACKEND: {
        if (!json_is_string(v)) {
            snprintf(why, why_size, "expected a string (\"sim\" or \"cuda\"), got %s", got);
            return CHAM_ERR_INVALID_ARG;
        }
        const char *s = json_string_value(v);
        if (!backend_known(s)) {
            snprintf(why, why_size, "unknown backend %s (known: sim, cuda)", got);
            return CHAM_ERR_INVALID_ARG;
        }
        *(const char **)dst = strcmp(s, "sim") == 0 ? "sim" : "cuda";
        return CHAM_OK;
    }
    case K_PRESET: {
        if (json_is_null(v)) {
            *(const char **)dst = NULL; /* the default preset */
            return CHAM_OK;
        }
        if (!json_is_string(v)) {
            snprintf(why, why_size, "expected a string (a device preset name) or null, "
                     "got %s", got);
            return CHAM_ERR_INVALID_ARG;
        }
        const cham_preset_t *p = cham_preset_find(json_string_value(v));
        if (!p) {
            char known[512];
            list_presets(known, sizeof known);
            snprintf(why, why_size, "unknown device preset %s (known: %s)", got, known);
            return CHAM_ERR_INVALID_ARG;
        }
        *(const char **)dst = p->name;
        return CHAM_OK;
    }
    case K_MODE: {
        const char *s = json_is_string(v) ? json_string_value(v) : NULL;
        if (!s) {
            snprintf(why, why_size, "expected a string (\"managed\" or \"advisor\"), got %s",
                     got);
            return CHAM_ERR_INVALID_ARG;
        }
        if (strcmp(s, "managed") == 0) {
            *(cham_mode_t *)dst = CHAM_MODE_MANAGED;
        } else if (strcmp(s, "advisor") == 0) {
            *(cham_mode_t *)dst = CHAM_MODE_ADVISOR;
        } else {
            snprintf(why, why_size, "unknown mode %s (known: managed, advisor)", got);
            return CHAM_ERR_INVALID_ARG;
        }
        return CHAM_OK;
    }
    case K_PLANNER: {
        const cham_planner_iface_t *p =
            cham_planner_by_name(json_is_string(v) ? json_string_value(v) : NULL);
        if (p) {
            *(cham_planner_kind_t *)dst = p->kind;
            return CHAM_OK;
        }
        char known[200];
        cham_planner_list(known, sizeof known);
        snprintf(why, why_size, "unknown planner %s (known: %s)", got, known);
        return CHAM_ERR_INVALID_ARG;
    }
    case K_ALLOCATOR: {
        const char *s = json_is_string(v) ? json_string_value(v) : NULL;
        if (s && cham_allocator_mode_parse(s, dst) == CHAM_OK)
            return CHAM_OK;
        snprintf(why, why_size, "unknown allocator %s (known: auto, classic, expandable)", got);
        return CHAM_ERR_INVALID_ARG;
    }
    case K_BOOL:
        if (!json_is_boolean(v)) {
            snprintf(why, why_size, "expected true or false, got %s", got);
            return CHAM_ERR_INVALID_ARG;
        }
        *(bool *)dst = json_is_true(v);
        return CHAM_OK;
    case K_INT:
    case K_U32:
    case K_SHIFT:
    case K_U64:
    case K_SIZE: {
        uint64_t u = 0;
        if (f->kind == K_SHIFT && json_is_string(v)) {
            if (strcmp(json_string_value(v), "auto") != 0) {
                snprintf(why, why_size, "expected \"auto\" or an integer, got %s", got);
                return CHAM_ERR_INVALID_ARG;
            }
            *(uint32_t *)dst = CHAM_ALLOCATOR_SHIFT_AUTO;
            return CHAM_OK;
        }
        if (f->kind == K_SIZE && json_is_string(v)) {
            char reason[160];
            if (!parse_size(json_string_value(v), &u, reason, sizeof reason)) {
                snprintf(why, why_size, "invalid byte size %s: %s", got, reason);
                return CHAM_ERR_INVALID_ARG;
            }
        } else {
            int r = json_to_u64(v, &u);
            if (r == 0) {
                if (f->kind == K_SIZE)
                    snprintf(why, why_size, "expected a byte size (an integer or a string "
                             "such as \"64GiB\"), got %s", got);
                else
                    snprintf(why, why_size, "expected a non-negative integer, got %s", got);
                return CHAM_ERR_INVALID_ARG;
            }
            if (r < 0) {
                snprintf(why, why_size, "%s is out of range %s", got, f->range);
                return CHAM_ERR_INVALID_ARG;
            }
        }
        if (!int_in_range(f, u)) {
            snprintf(why, why_size, "%s is out of range %s", got, f->range);
            return CHAM_ERR_INVALID_ARG;
        }
        if (f->kind == K_INT)
            *(int *)dst = (int)u;
        else if (f->kind == K_U32 || f->kind == K_SHIFT)
            *(uint32_t *)dst = (uint32_t)u;
        else
            *(uint64_t *)dst = u;
        return CHAM_OK;
    }
    case K_REAL: {
        if (!json_is_number(v)) {
            snprintf(why, why_size, "expected a number, got %s", got);
            return CHAM_ERR_INVALID_ARG;
        }
        double d = json_number_value(v);
        if (!real_in_range(f, d)) {
            snprintf(why, why_size, "%s is out of range %s", got, f->range);
            return CHAM_ERR_INVALID_ARG;
        }
        *(double *)dst = d;
        return CHAM_OK;
    }
    }
    CHAM_ASSERT(!"unknown field kind");
    return CHAM_ERR_INVALID_ARG;
}

/* ---- unknown keys ---------------------------------------------------------------*/

/* The known key closest to key, if close enough to be a likely typo. */
static const char *closest_key(const char *key)
{
    cham_closest_t c;
    cham_closest_init(&c, key);
    field_t f;
    for (size_t i = 0; field_at(i, &f); i++)
        cham_closest_offer(&c, f.key);
    return cham_closest_result(&c);
}

/* The field of key into *f; false when no field has that key. */
static bool find_field(const char *key, field_t *f)
{
    for (size_t i = 0; field_at(i, f); i++) {
        if (strcmp(f->key, key) == 0)
            return true;
    }
    return false;
}

/* ---- the file -------------------------------------------------------------------*/

cham_status_t cham_config_load_json(const char *path, cham_config_t *config, char *err,
                                    size_t err_size)
{
    CHAM_ASSERT(path && config);
    cham_set_err(err, err_size, "%s", "");
    char *text;
    size_t len;
    cham_status_t st = cham_file_read(path, CHAM_FILE_MAX_CONFIG, "a config file (one small "
                                      "JSON object)", &text, &len, err, err_size);
    if (st != CHAM_OK)
        return st;
    st = cham_config_parse_json(text, len, path, config, err, err_size);
    free(text);
    return st;
}

cham_status_t cham_config_parse_json(const char *text, size_t len, const char *path,
                                     cham_config_t *config, char *err, size_t err_size)
{
    CHAM_ASSERT(text && path && config);
    cham_set_err(err, err_size, "%s", "");
    cham_status_t st;
    /* A UTF-8 byte order mark is not JSON, but editors write it. */
    size_t start = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    bool blank = true;
    for (size_t i = start; i < len && blank; i++)
        blank = text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r';
    if (blank) {
        cham_set_err(err, err_size, "%s: empty file (expected a JSON object)", path);
        return CHAM_ERR_INVALID_ARG;
    }

    json_error_t jerr;
    json_t *root = json_loadb(text + start, len - start,
                              JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root) {
        if (jerr.line > 0)
            cham_set_err(err, err_size, "%s:%d:%d: syntax error: %s", path, jerr.line,
                    jerr.column > 0 ? jerr.column : 1, jerr.text);
        else
            cham_set_err(err, err_size, "%s: syntax error: %s", path, jerr.text);
        return CHAM_ERR_INVALID_ARG;
    }
    if (!json_is_object(root)) {
        char got[QUOTE_MAX + 16];
        describe(got, sizeof got, root);
        json_decref(root);
        cham_set_err(err, err_size, "%s: expected a JSON object at the top level, got %s", path,
                got);
        return CHAM_ERR_INVALID_ARG;
    }

    /* Fields go into a copy, so a failed load leaves *config as it was. */
    cham_config_t next = *config;
    const char *key;
    json_t *value;
    st = CHAM_OK;
    json_object_foreach(root, key, value) {
        char qkey[QUOTE_MAX + 8];
        quote(qkey, sizeof qkey, key);
        field_t f;
        if (!find_field(key, &f)) {
            const char *near = closest_key(key);
            if (strcmp(key, "device") == 0 && json_is_object(value))
                cham_set_err(err, err_size, "%s: unknown key %s (keys are flat: write the "
                        "device's fields such as \"preset\" at the top level)", path, qkey);
            else if (near)
                cham_set_err(err, err_size, "%s: unknown key %s (did you mean \"%s\"?)", path,
                        qkey, near);
            else
                cham_set_err(err, err_size, "%s: unknown key %s (docs/config.md lists the "
                        "keys)", path, qkey);
            st = CHAM_ERR_INVALID_ARG;
            break;
        }
        char why[768];
        st = apply(&next, &f, value, why, sizeof why);
        if (st != CHAM_OK) {
            cham_set_err(err, err_size, "%s: key %s: %s", path, qkey, why);
            break;
        }
    }
    json_decref(root);
    /* What loads is valid: the file's keys over the caller's config must
     * pass the same checks as cham_config_validate, rules between fields
     * (profiler and executor) included. */
    if (st == CHAM_OK) {
        char why[768];
        if (cham_config_validate(&next, why, sizeof why) != CHAM_OK) {
            cham_set_err(err, err_size, "%s: the resulting config is not valid: %s", path, why);
            st = CHAM_ERR_INVALID_ARG;
        }
    }
    if (st == CHAM_OK) {
        *config = next;
        cham_set_err(err, err_size, "%s", "");
    }
    return st;
}

/* ---- validate ----------------------------------------------------------------------*/

/* Checks one field of c; on failure writes "name: value is ..." to why. */
static bool check_field(const cham_config_t *c, const field_t *f, char *why, size_t why_size)
{
    const void *src = field_cptr(c, f);
    switch (f->kind) {
    case K_BACKEND: {
        const char *s = *(const char *const *)src;
        if (s && !backend_known(s)) {
            char q[QUOTE_MAX + 8];
            quote(q, sizeof q, s);
            snprintf(why, why_size, "%s: unknown backend %s (known: sim, cuda)", f->name, q);
            return false;
        }
        return true;
    }
    case K_PRESET: {
        const char *s = *(const char *const *)src;
        if (s && !cham_preset_find(s)) {
            char q[QUOTE_MAX + 8], known[512];
            quote(q, sizeof q, s);
            list_presets(known, sizeof known);
            snprintf(why, why_size, "%s: unknown device preset %s (known: %s)", f->name, q,
                     known);
            return false;
        }
        return true;
    }
    case K_MODE: {
        cham_mode_t m = *(const cham_mode_t *)src;
        if (m != CHAM_MODE_MANAGED && m != CHAM_MODE_ADVISOR) {
            snprintf(why, why_size, "%s: %d is not a mode (CHAM_MODE_MANAGED or "
                     "CHAM_MODE_ADVISOR)", f->name, (int)m);
            return false;
        }
        return true;
    }
    case K_PLANNER: {
        int k = (int)*(const cham_planner_kind_t *)src;
        if (!cham_planner_of((cham_planner_kind_t)k)) {
            snprintf(why, why_size, "%s: %d is not a planner (CHAM_PLANNER_*)", f->name, k);
            return false;
        }
        return true;
    }
    case K_ALLOCATOR: {
        int k = (int)*(const cham_allocator_mode_t *)src;
        if (k < CHAM_ALLOCATOR_AUTO || k > CHAM_ALLOCATOR_EXPANDABLE) {
            snprintf(why, why_size, "%s: %d is not an allocator mode (CHAM_ALLOCATOR_*)",
                     f->name, k);
            return false;
        }
        return true;
    }
    case K_BOOL:
        return true;
    case K_INT: {
        int v = *(const int *)src;
        if (v < 0 || !int_in_range(f, (uint64_t)v)) {
            snprintf(why, why_size, "%s: %d is out of range %s", f->name, v, f->range);
            return false;
        }
        return true;
    }
    case K_SHIFT:
        if (*(const uint32_t *)src == CHAM_ALLOCATOR_SHIFT_AUTO)
            return true;
        /* fall through */
    case K_U32:
    case K_U64:
    case K_SIZE: {
        uint64_t v = f->kind == K_U32 || f->kind == K_SHIFT ? *(const uint32_t *)src
                                                            : *(const uint64_t *)src;
        if (!int_in_range(f, v)) {
            snprintf(why, why_size, "%s: %llu is out of range %s", f->name,
                     (unsigned long long)v, f->range);
            return false;
        }
        return true;
    }
    case K_REAL: {
        double v = *(const double *)src;
        if (!real_in_range(f, v)) {
            char num[40];
            format_double(num, sizeof num, v);
            snprintf(why, why_size, "%s: %s is out of range %s", f->name, num, f->range);
            return false;
        }
        return true;
    }
    }
    CHAM_ASSERT(!"unknown field kind");
    return false;
}

cham_status_t cham_config_validate(const cham_config_t *config, char *err, size_t err_size)
{
    CHAM_ASSERT(config);
    cham_set_err(err, err_size, "%s", "");
    field_t f;
    for (size_t i = 0; field_at(i, &f); i++) {
        char why[768];
        if (!check_field(config, &f, why, sizeof why)) {
            cham_set_err(err, err_size, "%s", why);
            return CHAM_ERR_INVALID_ARG;
        }
    }
    if (!config->profiler && config->executor) {
        cham_set_err(err, err_size, "profiler: false needs executor: false (the executor acts "
                     "on what the profiler sees)");
        return CHAM_ERR_INVALID_ARG;
    }
    return CHAM_OK;
}

uint64_t cham_config_budget(const cham_config_t *config, uint64_t capacity)
{
    CHAM_ASSERT(config);
    uint64_t budget = config->memory_budget;
    return budget && budget < capacity ? budget : capacity;
}

bool cham_config_moves_model_state(const cham_config_t *c)
{
    const cham_planner_iface_t *p = cham_planner_of(c->planner);
    return c->executor && c->oom_handling && p && p->moves_model_state &&
           p->moves_model_state(c->model_state, cham_planner_options(p, c));
}
