/* Argument parsing shared by the commands: every number, size and list on
 * the command line is read here, with overflow checks; options are looked
 * up in a table, with a suggestion for a mistyped one; paths are checked
 * before a command runs. The conventions (messages, exit status, file
 * limits) are in docs/cli.md. */
#ifndef CHAM_TOOLS_ARGS_H
#define CHAM_TOOLS_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/workload.h"

/* ---- values --------------------------------------------------------------------*/

/* A size, by the one rule set of common/size.h (docs/cli.md, "Values"):
 * "64GiB", "512 MiB", "6.85MiB", "2GB", "4096". A number without a unit is
 * bytes, but one from 1 to TOOL_BARE_SIZE_MIN - 1 is refused ("--capacity
 * 12" is more likely a slip than 12 bytes); "12B" says bytes. false when it
 * is not one; tool_bad_value, given the same value string, then adds why
 * (and what the number was read as). */
#define TOOL_BARE_SIZE_MIN 4096u
bool tool_parse_size(const char *s, uint64_t *out);

/* A whole number in [lo, hi]: decimal digits only (no sign, no spaces, no
 * suffix). false when it is not one, is out of range or overflows. */
bool tool_parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* A finite decimal number in [lo, hi] ("0.5", "3e-4", "-2"); no spaces,
 * suffixes, hexadecimal, "inf" or "nan". */
bool tool_parse_real(const char *s, double lo, double hi, double *out);

/* A comma-separated list of whole numbers in [lo, hi], at most max of them:
 * "3", "60,140". No empty items ("1,", ",1", "1,,2"); an empty string is
 * not a list. *n gets the count. */
bool tool_parse_list(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, size_t max,
                     size_t *n);

/* --capacity: a size from 1 byte to TOOL_MAX_CAPACITY (*fraction = 0), or
 * a percentage above 0 and at most 1000% of the run's unconstrained peak
 * (*bytes = 0, *fraction = P / 100). Otherwise prints why and returns 2. */
#define TOOL_MAX_CAPACITY (UINT64_C(64) << 40)   /* the largest simulated device */
int tool_parse_capacity(const char *cmd, const char *v, uint64_t *bytes, double *fraction);

/* Prints "chameleon CMD: FLAG must be WANT, got "VALUE"" and returns 2;
 * when VALUE is the string tool_parse_size last refused, " (why)" follows. */
int tool_bad_value(const char *cmd, const char *flag, const char *want, const char *value);

/* --strategy: v as a strategy the command runs (refused: a bit 1u << s
 * for each strategy s it does not), 0; else prints the strategies it runs,
 * read from the strategies' table, and returns 2. */
int tool_parse_strategy(const char *cmd, const char *flag, const char *v, unsigned refused,
                        cham_strategy_t *out);

/* --search-seconds: v as a time limit above 0 (up to 1e6 s) into *out, 0;
 * else the message and 2. */
int tool_parse_search_seconds(const char *cmd, const char *flag, const char *v, double *out);

/* Whether name is a device preset; if not, prints "chameleon CMD: FLAG:
 * unknown device preset "NAME" (known: ...)". */
bool tool_check_preset(const char *cmd, const char *flag, const char *name);

/* ---- options -------------------------------------------------------------------*/

typedef struct tool_opt {
    const char *name;            /* "--steps" */
    bool value;                  /* takes the next argument as its value */
    /* What the option does to the command's state (value: its argument,
     * NULL for a flag without one): 0, or 2 after printing the problem
     * (tool_bad_value). NULL: the command reads the option itself. */
    int (*apply)(void *state, const char *flag, const char *value);
} tool_opt_t;

/* Whether any argument is --help or -h: it wins over every other option. */
bool tool_wants_help(int argc, char **argv);

/* The option argv[*i] names, from opts (n of them). An old name of an
 * option (args.c, `deprecated`) gives the option under its new name, after
 * a one-line note on stderr. For an option with a
 * value, *value gets the next argument and *i moves past it. NULL, after
 * printing the problem, when it is no known option ("chameleon CMD:
 * unknown option --stps (did you mean --steps?)") or its value is missing
 * ("option --steps needs a value"). */
const tool_opt_t *tool_find_opt(const char *cmd, const tool_opt_t *opts, size_t n, int argc,
                                char **argv, int *i, const char **value);

/* Every option of argv, in order, through its row's apply on state (rows
 * without one are skipped): 0, or 2 after the problem was printed. */
int tool_apply_opts(const char *cmd, const tool_opt_t *opts, size_t n, int argc, char **argv,
                    void *state);

/* The first pass of a command whose options override a model preset
 * (simulate, infer): every option of argv must be one of opts with its
 * value there, and *name (set beforehand to the default) gets --model's;
 * *m gets that preset. 0, or 2 after printing the problem (an unknown
 * model lists the known ones). */
int tool_model_preset(const char *cmd, const tool_opt_t *opts, size_t n, int argc, char **argv,
                      const char **name, cham_model_config_t *m);

/* The name in names (n of them) closest to s, if it is close enough to be
 * a likely typo (edit distance at most 2, or a quarter of its length);
 * else NULL. */
const char *tool_closest(const char *s, const char *const *names, size_t n);

/* ---- files ---------------------------------------------------------------------*/

/* Training data files (`train --data`) are read whole, as int32 tokens: at
 * most 1 GiB (enwik9 fits). */
#define TOOL_MAX_DATA_BYTES ((size_t)1 << 30)

/* Before a command runs, whether it will be able to write the file at path
 * (FLAG names the option): it is not a directory, its directory exists and
 * lets us create it, or it exists and can be opened for writing. A file
 * that did not exist is created and removed again. false after printing
 * "chameleon CMD: FLAG PATH: why". */
bool tool_check_output_file(const char *cmd, const char *flag, const char *path);
/* The same for a directory the command writes files into: it is one (or
 * can be made) and files can be created in it. A directory it had to make
 * is removed again, or kept when kept is not NULL (then *kept says whether
 * it was made: outputs inside it can then be checked too, and the caller
 * removes it if the command stops before running). */
bool tool_check_output_dir(const char *cmd, const char *flag, const char *dir, bool *kept);
/* Whether a and b name the same file: by device and inode when both exist,
 * else by the same directory and name. */
bool tool_same_file(const char *a, const char *b);

/* The outputs of a run (train, simulate): files (--trace, --report; a NULL
 * path is not asked for) and the --memory-curve directory with the files
 * it gets (TOOL_CURVE_FILES). */
typedef struct tool_output {
    const char *flag, *path;
} tool_output_t;
#define TOOL_CURVE_PROFILE "last-step-profile.json"
/* Before anything runs: the curve's directory first (the files may go in
 * it; one it had to make is kept while the run needs it, *made says so),
 * every file can be written, and no output is another output or the input
 * (input_flag and input_path, or NULL). 0, or the exit status after a
 * message (1: cannot write, 2: two paths that are one file); on failure a
 * directory made here is removed again. */
int tool_check_outputs(const char *cmd, const char *curve_dir, const tool_output_t *files,
                       size_t n_files, const char *input_flag, const char *input_path,
                       bool *made);

/* Prints text and a newline on stdout (a command's JSON). A write that
 * fails keeps its errno in tool_stdout_errno, for main's message at exit:
 * stdio forgets it once the text it could not write is dropped. */
bool tool_print_text(const char *text);
extern int tool_stdout_errno;

/* The host memory available to a new allocation (MemAvailable in
 * /proc/meminfo), or 0 when it cannot be known. */
uint64_t tool_host_available(void);

/* "1.50 GiB", "12.0 MiB", "512 bytes": bytes for messages. */
const char *tool_bytes(char *buf, size_t size, double bytes);

#endif
