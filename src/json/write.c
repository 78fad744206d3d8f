/* Writing the library's strict JSON files (json/write.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/file.h"
#include "common/message.h"
#include "json/format.h"
#include "json/write.h"

/* A JSON string "0x" + 16 hex digits; NULL when out of host memory. */
json_t *cham_json_hex64(uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
    return json_string(buf);
}

/* Adds value under key; a NULL value (out of memory) makes it cham_json_fail. */
bool cham_json_put(json_t *obj, const char *key, json_t *value)
{
    return value && json_object_set_new(obj, key, value) == 0;
}

json_t *cham_json_use_to_json(const cham_tensor_use_t *u)
{
    json_t *uo = json_object();
    bool ok = uo && cham_json_put(uo, "storage", json_integer((json_int_t)u->storage)) &&
              cham_json_put(uo, "data_ptr", cham_json_hex64(u->data_ptr)) &&
              cham_json_put(uo, "bytes", json_integer((json_int_t)u->bytes)) &&
              cham_json_put(uo, "storage_bytes", json_integer((json_int_t)u->storage_bytes)) &&
              cham_json_put(uo, "dtype", json_string(cham_json_dtype_names[u->dtype])) &&
              cham_json_put(uo, "use_count", json_integer((json_int_t)u->use_count)) &&
              cham_json_put(uo, "history", cham_json_hex64(u->history)) &&
              cham_json_put(uo, "output", json_boolean(u->output)) &&
              (!u->persistent || cham_json_put(uo, "persistent", json_true())) &&
              (!u->host_backed || cham_json_put(uo, "host_backed", json_true())) &&
              (!u->overwrites || cham_json_put(uo, "overwrites", json_true()));
    if (!ok) {
        json_decref(uo);
        return NULL;
    }
    return uo;
}

/* Writes one array element per line; false when out of host memory or the
 * write failed (ferror tells which). */
bool cham_json_write_value(FILE *fp, json_t *v, bool last)
{
    if (!v)
        return false;
    fputs("    ", fp);
    int rc = json_dumpf(v, fp, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(v);
    fputs(last ? "\n" : ",\n", fp);
    return rc == 0 && !ferror(fp);
}

cham_status_t cham_json_save_file(const char *path, bool (*write)(FILE *fp, const void *obj),
                                  const void *obj, char *err, size_t err_size)
{
    cham_out_t *o;
    cham_status_t st = cham_out_open(path, &o, err, err_size);
    if (st != CHAM_OK)
        return st;
    errno = 0;
    if (write(cham_out_file(o), obj) || !cham_out_ok(o))
        return cham_out_commit(o, err, err_size);     /* a write error names its errno */
    cham_out_abort(o);
    cham_set_err(err, err_size, "%s: out of host memory", path);
    return CHAM_ERR_HOST_OOM;
}
