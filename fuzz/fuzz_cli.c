/* Fuzz target: the command line's argument parsing. The input is split at
 * newlines into words; the first names the command (as argv[1] does for
 * `chameleon`, tools/chameleon.c) and the rest are its arguments, each in a
 * malloc'd string of its own so that reading past a word's end is caught.
 * With tool_parse_only set (tools/commands.h) each command returns once its
 * options are read and checked, so what runs is the option loops of
 * tools/cmd_*.c, the shared parsers of tools/args.c (sizes, numbers, lists,
 * option lookup with suggestions) and the model, preset and shape checks
 * the commands call; nothing reads, writes or simulates. Commands
 * print usage and errors to stdout and stderr: run with -close_fd_mask=3
 * (scripts/run-fuzz.sh does). Any crash, sanitizer report, leak or exit()
 * is a finding. Seeds: fuzz/corpus/cli/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "memfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_WORDS 64

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"demo", cmd_demo},         {"devices", cmd_devices},   {"experiment", cmd_experiment},
    {"plan", cmd_plan},         {"report", cmd_report},     {"simulate", cmd_simulate},
    {"train", cmd_train},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tool_parse_only = true;
    char *words[MAX_WORDS + 1];
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && n < MAX_WORDS; i++) {
        if (i < size && data[i] != '\n')
            continue;
        size_t len = i - start;
        words[n] = malloc(len + 1);
        if (!words[n])
            fuzz_fail("out of memory", NULL);
        memcpy(words[n], data + start, len);
        words[n][len] = '\0';
        n++;
        start = i + 1;
    }
    words[n] = NULL;

    for (size_t k = 0; n > 0 && k < sizeof commands / sizeof commands[0]; k++) {
        if (strcmp(words[0], commands[k].name) == 0) {
            int rc = commands[k].run(n - 1, words + 1);
            if (rc != 0 && rc != 2)
                fuzz_fail("a command's parsing returned neither 0 nor 2", words[0]);
            fuzz_note(rc == 0 ? "parsed" : "usage error", words[0]);
            break;
        }
    }
    for (int i = 0; i < n; i++)
        free(words[i]);
    return 0;
}
