/* The conventions the library's strict JSON files share (profiles:
 * src/profile/profile_json.c, policies: src/policy/policy_json.c;
 * docs/profile-format.md): the names of phases and dtypes in files and the
 * limits on numbers and quoted strings. Writing is json/write.h, reading
 * json/read.h. */
#ifndef CHAM_JSON_FORMAT_H
#define CHAM_JSON_FORMAT_H

#include <stdint.h>

/* Largest integer stored as a JSON number: exact in a double. */
#define CHAM_JSON_MAX_EXACT ((UINT64_C(1) << 53) - 1)
/* Strings quoted in messages are cut to this many characters. */
#define CHAM_JSON_QUOTE_MAX 40

/* Names in files, indexed by cham_phase_t and cham_dtype_t. Kept apart
 * from cham_phase_name and cham_dtype_name (src/runtime/names.c) so that
 * file formats cannot change when log names do. */
#define CHAM_JSON_N_PHASES 5
#define CHAM_JSON_N_DTYPES 14
extern const char *const cham_json_phase_names[CHAM_JSON_N_PHASES];
extern const char *const cham_json_dtype_names[CHAM_JSON_N_DTYPES];

#endif
