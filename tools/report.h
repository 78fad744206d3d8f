/* The run report (docs/trace.md): one HTML page from a run's JSON, and the
 * parts of that JSON `simulate` and `train` both write. */
#ifndef CHAM_TOOLS_REPORT_H
#define CHAM_TOOLS_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "chameleon/chameleon.h"

/* Writes the page for run (summary scalars, "series", "memory_curve",
 * "policy") to out; false with err when it cannot. */
bool tool_report_write(json_t *run, const char *out, char *err, size_t err_size);
/* The memory curve of the profile saved at path (null when there is none). */
json_t *tool_curve_json(const char *path, uint64_t capacity);
/* The memory curve (memory_curve.svg and .csv in dir) of the profile saved
 * at path; false with err when it cannot be read or written. */
bool tool_write_curve(const char *path, uint64_t capacity, const char *dir, char *err,
                      size_t err_size);
/* The policy saved at path (null when there is none). */
json_t *tool_policy_json(const char *path);

#endif
