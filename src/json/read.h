/* Reading the library's strict JSON files: the reader that reports the
 * first problem as "FILE: JSON.PATH: message" (docs/profile-format.md,
 * "Errors"), the header check, field readers and the tensor use object. */
#ifndef CHAM_JSON_READ_H
#define CHAM_JSON_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "chameleon/profile.h"
#include "chameleon/status.h"
#include "common/message.h"
#include "json/format.h"


/* The state of one load. path is the JSON path of the value being read
 * ("ops[12].uses[1].bytes"), grown and cut back as the reader descends. */
typedef struct cham_json_reader {
    const char *file;
    char *err;
    size_t err_size;
    cham_status_t status;    /* CHAM_OK until the first failure */
    char path[128];
    size_t path_len;
} cham_json_reader_t;

/* Reads and parses r->file: the root, or NULL with the failure recorded
 * (cannot open, "empty file (expected WHAT: a JSON object)", syntax errors
 * as "FILE:LINE:COL: ..."). */
json_t *cham_json_parse_file(cham_json_reader_t *r, const char *what);
/* Reads the whole file into *out (NUL-terminated, *len bytes before it). */
cham_status_t cham_json_read_file(cham_json_reader_t *r, char **out, size_t *len);

/* The path: push returns a mark that pop cuts back to. */
size_t cham_json_push_key(cham_json_reader_t *r, const char *key);
size_t cham_json_push_index(cham_json_reader_t *r, size_t i);
void cham_json_pop(cham_json_reader_t *r, size_t mark);

/* Records the first failure: "FILE: PATH: message" (no PATH at the top).
 * Always returns false. */
bool cham_json_fail(cham_json_reader_t *r, cham_status_t status, const char *fmt, ...)
    CHAM_PRINTF(3, 4);
/* "expected EXPECTED, got V". */
bool cham_json_fail_got(cham_json_reader_t *r, const char *expected, const json_t *v);
/* Checks "format" (must be format_name) and "version" (must be version) of a
 * chameleon file first, so that another kind of file, or a newer one, is
 * named as such rather than by its first odd key; kind ("profile") is used
 * in the messages. */
bool cham_json_read_header(cham_json_reader_t *r, const json_t *root, const char *kind,
                           const char *format_name, int version);
/* v as it reads in a message: strings quoted and cut, containers named. */
void cham_json_describe(char *buf, size_t n, const json_t *v);

/* v must be an object with exactly keys (all required): unknown keys are
 * reported first, since a misspelt key is also a missing one. */
/* keys: all required, but those written "?name" (optional "name"). */
bool cham_json_check_object(cham_json_reader_t *r, const json_t *v, const char *what,
                            const char *const *keys, size_t n_keys);

/* Field readers: each reads obj[key] with key on the path. */
/* A finite number, integer or real. */
bool cham_json_read_number(cham_json_reader_t *r, const json_t *obj, const char *key,
                           double *out);
bool cham_json_read_u53(cham_json_reader_t *r, const json_t *obj, const char *key,
                        uint64_t *out);
bool cham_json_read_u32(cham_json_reader_t *r, const json_t *obj, const char *key,
                        uint64_t max, uint32_t *out);
bool cham_json_read_hex64(cham_json_reader_t *r, const json_t *obj, const char *key,
                          uint64_t *out);
bool cham_json_read_bool(cham_json_reader_t *r, const json_t *obj, const char *key, bool *out);
/* obj[key] must be one of names[0 .. n): *out gets its index. */
bool cham_json_read_name(cham_json_reader_t *r, const json_t *obj, const char *key,
                         const char *what, const char *const *names, size_t n, int *out);
/* obj[key] must be an array: returned, with key pushed on the path (the
 * caller pops mark), or NULL after a failure. */
const json_t *cham_json_read_array(cham_json_reader_t *r, const json_t *obj, const char *key,
                                   size_t *mark);
/* v must be a tensor use object (docs/profile-format.md). */
bool cham_json_read_use(cham_json_reader_t *r, const json_t *v, cham_tensor_use_t *u);

#endif
