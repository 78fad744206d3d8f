/* Fuzz target: the JSON config loader (cham_config_load_json,
 * src/runtime/config.c: byte-size strings, ranges, key suggestions) read
 * over the defaults, then cham_config_validate on what it produced.
 * Besides crashes, sanitizer reports and leaks, it checks the promises of
 * docs/config.md: a failed load leaves the config exactly as it was, and
 * every message starts with the path. Seeds: fuzz/corpus/config/. */
#include <stdint.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "memfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fuzz_memfile_t input;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (input.path[0] == '\0')
        fuzz_memfile_open(&input, "config-in");
    fuzz_memfile_set(&input, data, size);

    cham_config_t before = cham_config_default(), config;
    memcpy(&config, &before, sizeof config);   /* padding too, for memcmp */
    char err[512];
    cham_status_t st = cham_config_load_json(input.path, &config, err, sizeof err);
    if (st != CHAM_OK) {
        if (memcmp(&config, &before, sizeof config) != 0)
            fuzz_fail("a failed load changed the config", err);
        if (strncmp(err, input.path, strlen(input.path)) != 0)
            fuzz_fail("a message does not start with the path", err);
        fuzz_note("rejected", err);
        return 0;
    }
    fuzz_note("loaded", input.path);
    /* Anything the file sets is inside the ranges validate checks, except
     * the one cross-field rule (profiler: false needs executor: false). */
    if (cham_config_validate(&config, err, sizeof err) != CHAM_OK &&
        !(config.executor && !config.profiler))
        fuzz_fail("a loaded config does not validate", err);
    return 0;
}
