/* Writing the library's strict JSON files: 64-bit hex strings, the tensor
 * use object, one array element per line, and the save wrapper that leaves
 * no partly written file behind (docs/profile-format.md). */
#ifndef CHAM_JSON_WRITE_H
#define CHAM_JSON_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "chameleon/profile.h"
#include "chameleon/status.h"

/* A JSON string "0x" + 16 hex digits; NULL when out of host memory. */
json_t *cham_json_hex64(uint64_t v);
/* Adds value under key (taking its reference); a NULL value (out of
 * memory) makes it fail. */
bool cham_json_put(json_t *obj, const char *key, json_t *value);
/* A tensor use object (docs/profile-format.md); NULL when out of memory. */
json_t *cham_json_use_to_json(const cham_tensor_use_t *u);
/* Writes "    " + v compact + "," unless last + newline, and drops v;
 * false when v is NULL (out of memory) or the write failed. */
bool cham_json_write_value(FILE *fp, json_t *v, bool last);
/* Writes the file at path through the one writer (common/file.h: whole
 * under its name or not there) with write(fp, obj); on failure the file at
 * path is as it was and err is "PATH: cannot create: ...", "PATH: cannot
 * write: ..." or "PATH: out of host memory" (write returning false with no
 * stream error means out of memory). */
cham_status_t cham_json_save_file(const char *path, bool (*write)(FILE *fp, const void *obj),
                                  const void *obj, char *err, size_t err_size);

#endif
