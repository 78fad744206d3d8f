/* Reading the library's strict JSON files (json/read.h): the reader
 * names the file and the JSON path of the first problem. */
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

#include "common/file.h"
#include "common/message.h"
#include "json/read.h"

#define MAX_EXACT CHAM_JSON_MAX_EXACT
#define QUOTE_MAX CHAM_JSON_QUOTE_MAX

/* The keys of a tensor use, in the order they are written. */
static const char *const use_keys[] = {"storage", "data_ptr", "bytes", "storage_bytes",
                                       "dtype", "use_count", "history", "output",
                                       "?persistent", "?host_backed", "?overwrites"};

size_t cham_json_push_key(cham_json_reader_t *r, const char *key)
{
    size_t mark = r->path_len;
    int w = snprintf(r->path + mark, sizeof r->path - mark, "%s%s", mark ? "." : "", key);
    r->path_len = w < 0 ? mark : mark + (size_t)w;
    if (r->path_len >= sizeof r->path)
        r->path_len = sizeof r->path - 1;
    return mark;
}

size_t cham_json_push_index(cham_json_reader_t *r, size_t i)
{
    size_t mark = r->path_len;
    int w = snprintf(r->path + mark, sizeof r->path - mark, "[%zu]", i);
    r->path_len = w < 0 ? mark : mark + (size_t)w;
    if (r->path_len >= sizeof r->path)
        r->path_len = sizeof r->path - 1;
    return mark;
}

void cham_json_pop(cham_json_reader_t *r, size_t mark)
{
    r->path_len = mark;
    r->path[mark] = '\0';
}

/* Records the first failure: "FILE: PATH: message" (no PATH at the top). */
bool cham_json_fail(cham_json_reader_t *r, cham_status_t status, const char *fmt, ...)
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
void cham_json_describe(char *buf, size_t n, const json_t *v)
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

bool cham_json_fail_got(cham_json_reader_t *r, const char *expected, const json_t *v)
{
    char got[QUOTE_MAX + 16];
    cham_json_describe(got, sizeof got, v);
    return cham_json_fail(r, CHAM_ERR_INVALID_ARG, "expected %s, got %s", expected, got);
}

/* A key of a list; "?name" is the optional key "name". */
static const char *key_name(const char *k)
{
    return k[0] == '?' ? k + 1 : k;
}

static bool in_list(const char *key, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(key, key_name(keys[i])) == 0)
            return true;
    }
    return false;
}

/* v must be an object with exactly keys (all required but those written
 * "?name"): unknown keys are reported first, since a misspelt key is also
 * a missing one. */
bool cham_json_check_object(cham_json_reader_t *r, const json_t *v, const char *what,
                         const char *const *keys, size_t n_keys)
{
    if (!json_is_object(v))
        return cham_json_fail_got(r, what, v);
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)v, key, value) {
        if (!in_list(key, keys, n_keys)) {
            char known[256];
            size_t used = 0;
            known[0] = '\0';
            for (size_t i = 0; i < n_keys && used + 1 < sizeof known; i++) {
                int w = snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                                 key_name(keys[i]));
                if (w < 0)
                    break;
                used += (size_t)w;
            }
            return cham_json_fail(r, CHAM_ERR_INVALID_ARG,
                                  "unknown key \"%.*s\" (the keys are: %s)",
                        QUOTE_MAX, key, known);
        }
    }
    for (size_t i = 0; i < n_keys; i++) {
        if (keys[i][0] != '?' && !json_object_get(v, keys[i]))
            return cham_json_fail(r, CHAM_ERR_INVALID_ARG, "missing key \"%s\"", keys[i]);
    }
    return true;
}

/* Field readers: each reads obj[key] (present: cham_json_check_object ran) with
 * key on the path, so a failure names the field. */

bool cham_json_read_number(cham_json_reader_t *r, const json_t *obj, const char *key,
                           double *out)
{
    size_t mark = cham_json_push_key(r, key);
    const json_t *v = json_object_get(obj, key);
    bool ok = json_is_number(v);
    if (ok)
        *out = json_number_value(v);
    else
        cham_json_fail_got(r, "a number", v);
    cham_json_pop(r, mark);
    return ok;
}

bool cham_json_read_u53(cham_json_reader_t *r, const json_t *obj, const char *key, uint64_t *out)
{
    size_t mark = cham_json_push_key(r, key);
    const json_t *v = json_object_get(obj, key);
    bool ok = false;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        cham_json_fail_got(r, "a non-negative integer", v);
    else if ((uint64_t)json_integer_value(v) > MAX_EXACT)
        cham_json_fail(r, CHAM_ERR_INVALID_ARG, "%" JSON_INTEGER_FORMAT " is above 2^53 - 1, the "
             "largest integer the format stores", json_integer_value(v));
    else {
        *out = (uint64_t)json_integer_value(v);
        ok = true;
    }
    cham_json_pop(r, mark);
    return ok;
}

bool cham_json_read_u32(cham_json_reader_t *r, const json_t *obj, const char *key, uint64_t max,
                     uint32_t *out)
{
    size_t mark = cham_json_push_key(r, key);
    const json_t *v = json_object_get(obj, key);
    bool ok = false;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        cham_json_fail_got(r, "a non-negative integer", v);
    else if ((uint64_t)json_integer_value(v) > max)
        cham_json_fail(r, CHAM_ERR_INVALID_ARG, "%" JSON_INTEGER_FORMAT " is too large (at most %"
             PRIu64 ")", json_integer_value(v), max);
    else {
        *out = (uint32_t)json_integer_value(v);
        ok = true;
    }
    cham_json_pop(r, mark);
    return ok;
}

bool cham_json_read_hex64(cham_json_reader_t *r, const json_t *obj, const char *key, uint64_t *out)
{
    size_t mark = cham_json_push_key(r, key);
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
        cham_json_fail_got(r, "a hex string \"0x\" + 1 to 16 hex digits", v);
    cham_json_pop(r, mark);
    return ok;
}

bool cham_json_read_bool(cham_json_reader_t *r, const json_t *obj, const char *key, bool *out)
{
    size_t mark = cham_json_push_key(r, key);
    const json_t *v = json_object_get(obj, key);
    bool ok = json_is_boolean(v);
    if (ok)
        *out = json_is_true(v);
    else
        cham_json_fail_got(r, "true or false", v);
    cham_json_pop(r, mark);
    return ok;
}

/* obj[key] must be one of names[0 .. n): *out gets its index. */
bool cham_json_read_name(cham_json_reader_t *r, const json_t *obj, const char *key,
                         const char *what,
                      const char *const *names, size_t n, int *out)
{
    size_t mark = cham_json_push_key(r, key);
    const json_t *v = json_object_get(obj, key);
    bool ok = false;
    if (!json_is_string(v)) {
        char expected[64];
        snprintf(expected, sizeof expected, "a %s name (a string)", what);
        cham_json_fail_got(r, expected, v);
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
            cham_json_describe(got, sizeof got, v);
            cham_json_fail(r, CHAM_ERR_INVALID_ARG, "unknown %s %s (expected %s)", what, got, list);
        }
    }
    cham_json_pop(r, mark);
    return ok;
}

/* obj[key] must be an array: returned, with key pushed on the path (the
 * caller pops mark), or NULL after a failure. */
const json_t *cham_json_read_array(cham_json_reader_t *r, const json_t *obj, const char *key,
                                   size_t *mark)
{
    *mark = cham_json_push_key(r, key);
    const json_t *v = json_object_get(obj, key);
    if (!json_is_array(v)) {
        cham_json_fail_got(r, "an array", v);
        cham_json_pop(r, *mark);
        return NULL;
    }
    return v;
}

bool cham_json_read_use(cham_json_reader_t *r, const json_t *v, cham_tensor_use_t *u)
{
    if (!cham_json_check_object(r, v, "a tensor use (an object)", use_keys,
                                sizeof use_keys / sizeof use_keys[0]))
        return false;
    int dtype = 0;
    bool ok = cham_json_read_u53(r, v, "storage", &u->storage) &&
              cham_json_read_hex64(r, v, "data_ptr", &u->data_ptr) &&
              cham_json_read_u53(r, v, "bytes", &u->bytes) &&
              cham_json_read_u53(r, v, "storage_bytes", &u->storage_bytes) &&
              cham_json_read_name(r, v, "dtype", "dtype", cham_json_dtype_names,
                                  CHAM_JSON_N_DTYPES, &dtype) &&
              cham_json_read_u32(r, v, "use_count", UINT32_MAX, &u->use_count) &&
              cham_json_read_hex64(r, v, "history", &u->history) &&
              cham_json_read_bool(r, v, "output", &u->output) &&
              (!json_object_get(v, "persistent") ||
               cham_json_read_bool(r, v, "persistent", &u->persistent)) &&
              (!json_object_get(v, "host_backed") ||
               cham_json_read_bool(r, v, "host_backed", &u->host_backed)) &&
              (!json_object_get(v, "overwrites") ||
               cham_json_read_bool(r, v, "overwrites", &u->overwrites));
    u->dtype = (cham_dtype_t)dtype;
    return ok;
}

/* Reads the whole file into *out (NUL-terminated, *len bytes before it),
 * at most CHAM_FILE_MAX_JSON bytes (common/file.h). */
cham_status_t cham_json_read_file(cham_json_reader_t *r, char **out, size_t *len)
{
    cham_status_t st = cham_file_read(r->file, CHAM_FILE_MAX_JSON, "a profile or policy", out,
                                      len, r->err, r->err_size);
    if (st != CHAM_OK)
        r->status = st;
    return st;
}

json_t *cham_json_parse_file(cham_json_reader_t *r, const char *what)
{
    char *text;
    size_t len;
    if (cham_json_read_file(r, &text, &len) != CHAM_OK)
        return NULL;

    bool blank = true;
    for (size_t i = 0; i < len && blank; i++)
        blank = text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r';
    if (blank) {
        free(text);
        cham_json_fail(r, CHAM_ERR_INVALID_ARG, "empty file (expected %s: a JSON object)", what);
        return NULL;
    }

    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    free(text);
    /* jansson leaves the message empty when it cannot even set up its
     * lexer, which only an allocation failure does. */
    if (!root && (json_error_code(&jerr) == json_error_out_of_memory || !jerr.text[0])) {
        r->status = CHAM_ERR_HOST_OOM;
        cham_set_err(r->err, r->err_size, "%s: out of host memory parsing the file", r->file);
        return NULL;
    }
    if (!root) {
        bool truncated = json_error_code(&jerr) == json_error_premature_end_of_input;
        int line = jerr.line > 0 ? jerr.line : 1, col = jerr.column > 0 ? jerr.column : 1;
        r->status = CHAM_ERR_INVALID_ARG;
        cham_set_err(r->err, r->err_size, "%s:%d:%d: %s: %s", r->file, line, col,
                     truncated ? "unexpected end of file (truncated?)" : "syntax error",
                     jerr.text);
        return NULL;
    }
    return root;
}

bool cham_json_read_header(cham_json_reader_t *r, const json_t *root, const char *kind,
                           const char *format_name, int version)
{
    const json_t *format = json_object_get(root, "format");
    if (!format)
        return cham_json_fail(r, CHAM_ERR_INVALID_ARG, "not a chameleon %s: no \"format\" key",
                              kind);
    if (!json_is_string(format) || strcmp(json_string_value(format), format_name) != 0) {
        char got[CHAM_JSON_QUOTE_MAX + 16];
        cham_json_describe(got, sizeof got, format);
        return cham_json_fail(r, CHAM_ERR_INVALID_ARG, "not a chameleon %s: \"format\" is %s, "
                              "expected \"%s\"", kind, got, format_name);
    }
    const json_t *v = json_object_get(root, "version");
    if (!v)
        return cham_json_fail(r, CHAM_ERR_INVALID_ARG, "missing key \"version\"");
    size_t mark = cham_json_push_key(r, "version");
    bool ok = true;
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        ok = cham_json_fail_got(r, "a positive integer", v);
    cham_json_pop(r, mark);
    if (ok && json_integer_value(v) != version)
        ok = cham_json_fail(r, CHAM_ERR_UNSUPPORTED, "%s format version %" JSON_INTEGER_FORMAT
                            " is newer than this library reads (version %d)", kind,
                            json_integer_value(v), version);
    return ok;
}
