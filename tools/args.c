/* Argument parsing shared by the commands (args.h). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef __linux__
#include <linux/magic.h>
#include <sys/vfs.h>
#endif
#include <unistd.h>

#include "chameleon/chameleon.h"
#include "args.h"
#include "commands.h"
#include "common/closest.h"
#include "common/file.h"
#include "common/size.h"

bool tool_parse_only = false;

/* ---- values --------------------------------------------------------------------*/

/* Decimal digits at s, as a number; false when there are none or it
 * overflows. *end gets the first character after them. */
static bool digits(const char *s, uint64_t *out, const char **end)
{
    uint64_t n = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (n > (UINT64_MAX - d) / 10)
            return false;
        n = n * 10 + d;
    }
    *end = p;
    *out = n;
    return p > s;
}

/* Why the last size refused was refused, and its text (compared by address
 * in tool_bad_value, so the message says what was understood). */
static const char *refused_size;
static char refused_why[256];

bool tool_parse_size(const char *s, uint64_t *out)
{
    uint64_t n;
    bool unit;
    refused_size = s;
    if (!cham_size_parse(s, &n, &unit, refused_why, sizeof refused_why))
        return false;
    if (!unit && n > 0 && n < TOOL_BARE_SIZE_MIN) {
        snprintf(refused_why, sizeof refused_why, "read as %llu bytes; a number without a "
                 "unit below %u is refused as a likely slip: write %lluB for bytes or add a "
                 "unit such as %lluMiB", (unsigned long long)n, (unsigned)TOOL_BARE_SIZE_MIN,
                 (unsigned long long)n, (unsigned long long)n);
        return false;
    }
    refused_size = NULL;
    *out = n;
    return true;
}

bool tool_parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    uint64_t n;
    const char *end;
    if (!digits(s, &n, &end) || *end || n < lo || n > hi)
        return false;
    *out = n;
    return true;
}

bool tool_parse_real(const char *s, double lo, double hi, double *out)
{
    /* [-+] digits [. digits] [e [-+] digits], with a digit somewhere before
     * the exponent: what strtod reads, without its spaces, hex, inf, nan. */
    const char *p = s;
    if (*p == '-' || *p == '+')
        p++;
    bool any = false;
    for (; isdigit((unsigned char)*p); p++)
        any = true;
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++)
            any = true;
    if (!any)
        return false;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '-' || *p == '+')
            p++;
        if (!isdigit((unsigned char)*p))
            return false;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p)
        return false;
    errno = 0;
    double x = strtod(s, NULL);
    if (!isfinite(x) || !(x >= lo && x <= hi))
        return false;
    *out = x;
    return true;
}

bool tool_parse_list(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, size_t max,
                     size_t *n)
{
    size_t k = 0;
    const char *p = s;
    for (;;) {
        uint64_t v;
        const char *end;
        if (k == max || !digits(p, &v, &end) || (*end && *end != ',') || v < lo || v > hi)
            return false;
        out[k++] = v;
        if (!*end)
            break;
        p = end + 1;
    }
    *n = k;
    return true;
}

int tool_bad_value(const char *cmd, const char *flag, const char *want, const char *value)
{
    if (value && value == refused_size)
        fprintf(stderr, "chameleon %s: %s must be %s, got \"%s\" (%s)\n", cmd, flag, want,
                value, refused_why);
    else
        fprintf(stderr, "chameleon %s: %s must be %s, got \"%s\"\n", cmd, flag, want, value);
    return 2;
}

int tool_parse_strategy(const char *cmd, const char *flag, const char *v, unsigned refused,
                        cham_strategy_t *out)
{
    cham_strategy_t s;
    bool known = cham_strategy_parse(v, &s) == CHAM_OK;
    if (known && !(refused & 1u << s)) {
        *out = s;
        return 0;
    }
    /* The list from the strategies' own table: "a, b or c". */
    char want[400] = "";
    size_t at = 0, left = 0;
    for (int k = 0; k < CHAM_STRATEGY_COUNT; k++)
        left += !(refused & 1u << k);
    for (int k = 0; k < CHAM_STRATEGY_COUNT && at < sizeof want; k++) {
        if (refused & 1u << k)
            continue;
        left--;
        int n = snprintf(want + at, sizeof want - at, "%s%s",
                         cham_strategy_name((cham_strategy_t)k),
                         left > 1 ? ", " : left == 1 ? " or " : "");
        if (n < 0)
            break;
        at += (size_t)n;
    }
    if (known) {
        fprintf(stderr, "chameleon %s: %s %s: a strategy this command does not run (it runs %s)\n",
                cmd, flag, v, want);
        return 2;
    }
    return tool_bad_value(cmd, flag, want, v);
}

int tool_parse_search_seconds(const char *cmd, const char *flag, const char *v, double *out)
{
    double sec;
    if (!tool_parse_real(v, 0, 1e6, &sec) || sec == 0)
        return tool_bad_value(cmd, flag, "seconds above 0, such as 2.5", v);
    *out = sec;
    return 0;
}

bool tool_check_preset(const char *cmd, const char *flag, const char *name)
{
    if (cham_preset_find(name))
        return true;
    fprintf(stderr, "chameleon %s: %s: unknown device preset \"%s\" (known:", cmd, flag, name);
    for (size_t k = 0; k < cham_preset_count(); k++)
        fprintf(stderr, "%s %s", k ? "," : "", cham_preset_at(k)->name);
    fprintf(stderr, "; `chameleon devices` describes them)\n");
    return false;
}

/* ---- options -------------------------------------------------------------------*/

const char *tool_closest(const char *s, const char *const *names, size_t n)
{
    cham_closest_t c;
    cham_closest_init(&c, s);
    for (size_t k = 0; k < n; k++)
        cham_closest_offer(&c, names[k]);
    return cham_closest_result(&c);
}

static const tool_opt_t *lookup(const tool_opt_t *opts, size_t n, const char *a)
{
    for (size_t k = 0; k < n; k++)
        if (strcmp(a, opts[k].name) == 0)
            return &opts[k];
    return NULL;
}

/* Old option names, kept for one release (docs/cli.md, "Option names"):
 * the same option as the new name, after a note on stderr. */
static const struct {
    const char *cmd, *old, *now;
} deprecated[] = {
    {"train", "--budget", "--capacity"},
    {"train", "--drop-prob", "--layer-drop"},
    {"train", "--policy", "--strategy"},
    {"simulate", "--policy", "--strategy"},
    {"infer", "--policy", "--strategy"},
    /* Every other command's --json prints its run on stdout; plan's wrote
     * a file. The next release's plan --json prints the policy. */
    {"plan", "--json", "--save"},
};

bool tool_wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return true;
    return false;
}

const tool_opt_t *tool_find_opt(const char *cmd, const tool_opt_t *opts, size_t n, int argc,
                                char **argv, int *i, const char **value)
{
    const char *a = argv[*i];
    *value = NULL;
    const tool_opt_t *o = lookup(opts, n, a);
    /* Once per name: a command may read its arguments twice. */
    static bool noted[sizeof deprecated / sizeof deprecated[0]];
    for (size_t k = 0; !o && k < sizeof deprecated / sizeof deprecated[0]; k++) {
        if (strcmp(cmd, deprecated[k].cmd) == 0 && strcmp(a, deprecated[k].old) == 0 &&
            (o = lookup(opts, n, deprecated[k].now)) && !noted[k]) {
            noted[k] = true;
            fprintf(stderr, "chameleon %s: note: %s is deprecated, use %s (the same "
                    "option; the old name goes in the next release)\n", cmd, a, o->name);
        }
    }
    if (!o) {
        if (a[0] != '-') {
            fprintf(stderr, "chameleon %s: unexpected argument \"%s\"\n", cmd, a);
            return NULL;
        }
        /* "--stpes", "-steps", "--Steps": the closest option, if close. */
        const char *names[64], *near;
        size_t m = n < 64 ? n : 64;
        for (size_t k = 0; k < m; k++)
            names[k] = opts[k].name;
        if ((near = tool_closest(a, names, m)))
            fprintf(stderr, "chameleon %s: unknown option %s (did you mean %s?)\n", cmd, a,
                    near);
        else
            fprintf(stderr, "chameleon %s: unknown option %s (`chameleon %s --help` lists "
                    "them)\n", cmd, a, cmd);
        return NULL;
    }
    if (!o->value)
        return o;
    if (*i + 1 >= argc) {
        fprintf(stderr, "chameleon %s: option %s needs a value\n", cmd, a);
        return NULL;
    }
    const char *v = argv[*i + 1];
    if (!v[0]) {
        fprintf(stderr, "chameleon %s: option %s needs a value, got \"\"\n", cmd, a);
        return NULL;
    }
    if (strncmp(v, "--", 2) == 0 && lookup(opts, n, v)) {
        fprintf(stderr, "chameleon %s: option %s needs a value, got the option %s\n", cmd, a,
                v);
        return NULL;
    }
    *value = v;
    ++*i;
    return o;
}

int tool_apply_opts(const char *cmd, const tool_opt_t *opts, size_t n, int argc, char **argv,
                    void *state)
{
    for (int i = 0; i < argc; i++) {
        const char *v;
        const tool_opt_t *opt = tool_find_opt(cmd, opts, n, argc, argv, &i, &v);
        if (!opt)
            return 2;
        int rc = opt->apply ? opt->apply(state, opt->name, v) : 0;
        if (rc)
            return rc;
    }
    return 0;
}

int tool_model_preset(const char *cmd, const tool_opt_t *opts, size_t n, int argc, char **argv,
                      const char **name, cham_model_config_t *m)
{
    for (int i = 0; i < argc; i++) {
        const char *v;
        const tool_opt_t *opt = tool_find_opt(cmd, opts, n, argc, argv, &i, &v);
        if (!opt)
            return 2;
        if (strcmp(opt->name, "--model") == 0)
            *name = v;
    }
    if (cham_model_preset(*name, m) == CHAM_OK)
        return 0;
    fprintf(stderr, "chameleon %s: --model: unknown model \"%s\" (known:", cmd, *name);
    for (size_t i = 0; i < cham_model_preset_count(); i++)
        fprintf(stderr, " %s", cham_model_preset_name(i));
    fprintf(stderr, ", gpt2, llama2, llama3, mixtral)\n");
    return 2;
}

/* ---- files ---------------------------------------------------------------------*/

/* Whether path is in procfs or sysfs, whose files root may open for
 * writing but whose writes fail (or change the kernel's settings). */
static bool kernel_file(const char *path)
{
#ifdef __linux__
    struct statfs fs;
    return statfs(path, &fs) == 0 &&
           (fs.f_type == PROC_SUPER_MAGIC || fs.f_type == SYSFS_MAGIC);
#else
    (void)path;
    return false;
#endif
}

bool tool_check_output_file(const char *cmd, const char *flag, const char *path)
{
    struct stat s;
    int fd;
    if (!path[0]) {
        fprintf(stderr, "chameleon %s: %s needs a file name, got \"\"\n", cmd, flag);
        return false;
    }
    if (stat(path, &s) == 0) {
        if (S_ISDIR(s.st_mode)) {
            fprintf(stderr, "chameleon %s: %s %s: cannot write: it is a directory\n", cmd,
                    flag, path);
            return false;
        }
        if (access(path, W_OK) != 0) {     /* neither truncated nor opened */
            fprintf(stderr, "chameleon %s: %s %s: cannot write: %s\n", cmd, flag, path,
                    strerror(errno));
            return false;
        }
        if (kernel_file(path)) {           /* open for writing says yes; write fails */
            fprintf(stderr, "chameleon %s: %s %s: cannot write: a file of the kernel's "
                    "(/proc, /sys), not one to write output to\n", cmd, flag, path);
            return false;
        }
        return true;
    }
    if (errno != ENOENT || (fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0666)) < 0) {
        fprintf(stderr, "chameleon %s: %s %s: cannot create: %s\n", cmd, flag, path,
                strerror(errno));
        return false;
    }
    close(fd);
    unlink(path);
    return true;
}

bool tool_check_output_dir(const char *cmd, const char *flag, const char *dir, bool *kept)
{
    struct stat s;
    bool made = false;
    if (kept)
        *kept = false;
    if (!dir[0]) {
        fprintf(stderr, "chameleon %s: %s needs a directory name, got \"\"\n", cmd, flag);
        return false;
    }
    if (stat(dir, &s) == 0) {
        if (!S_ISDIR(s.st_mode)) {
            fprintf(stderr, "chameleon %s: %s %s: not a directory (it is %s)\n", cmd, flag,
                    dir, cham_file_kind(dir));
            return false;
        }
    } else if (errno != ENOENT || mkdir(dir, 0777) != 0) {
        fprintf(stderr, "chameleon %s: %s %s: cannot make the directory: %s\n", cmd, flag, dir,
                strerror(errno));
        return false;
    } else {
        made = true;
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.chameleon-write-test-XXXXXX", dir);
    int fd = mkstemp(probe);
    int e = errno;
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    }
    if (made && (fd < 0 || !kept))
        rmdir(dir);
    else if (made)
        *kept = true;
    if (fd < 0) {
        fprintf(stderr, "chameleon %s: %s %s: cannot write files in it: %s\n", cmd, flag, dir,
                strerror(e));
        return false;
    }
    return true;
}

/* The directory part of path ("." when there is none). */
static void parent(char *buf, size_t size, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(buf, size, ".");
    else if (slash == path)
        snprintf(buf, size, "/");
    else
        snprintf(buf, size, "%.*s", (int)(slash - path), path);
}

bool tool_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea || eb)
        return false;
    const char *na = strrchr(a, '/'), *nb = strrchr(b, '/');
    if (strcmp(na ? na + 1 : a, nb ? nb + 1 : b) != 0)
        return false;
    char pa[4096], pb[4096];
    parent(pa, sizeof pa, a);
    parent(pb, sizeof pb, b);
    return stat(pa, &sa) == 0 && stat(pb, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

int tool_stdout_errno;

bool tool_print_text(const char *text)
{
    errno = 0;
    bool ok = fputs(text, stdout) != EOF && putchar('\n') != EOF;
    if (!ok && !tool_stdout_errno)
        tool_stdout_errno = errno ? errno : EIO;
    return ok;
}

uint64_t tool_host_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    fclose(f);
    return found && kib < UINT64_MAX / 1024 ? (uint64_t)kib * 1024 : 0;
}

const char *tool_bytes(char *buf, size_t size, double bytes)
{
    if (bytes >= 1024.0 * 1024 * 1024 * 1024)
        snprintf(buf, size, "%.2f TiB", bytes / (1024.0 * 1024 * 1024 * 1024));
    else if (bytes >= 1024.0 * 1024 * 1024)
        snprintf(buf, size, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else if (bytes >= 1024.0 * 1024)
        snprintf(buf, size, "%.1f MiB", bytes / (1024.0 * 1024));
    else if (bytes >= 1024.0)
        snprintf(buf, size, "%.1f KiB", bytes / 1024.0);
    else
        snprintf(buf, size, "%.0f bytes", bytes);
    return buf;
}

static int check_outputs(const char *cmd, const char *curve_dir, const tool_output_t *files,
                         size_t n_files, const char *input_flag, const char *input_path,
                         bool *made)
{
    if (curve_dir && !tool_check_output_dir(cmd, "--memory-curve", curve_dir, made))
        return 1;
    for (size_t k = 0; k < n_files; k++)
        if (files[k].path && !tool_check_output_file(cmd, files[k].flag, files[k].path))
            return 1;
    /* Every path written, the curve's files included. */
    static const char *const curve_files[] = {TOOL_CURVE_PROFILE, "memory_curve.svg",
                                              "memory_curve.csv"};
    enum { MAX_OUT = 8 };
    char names[3][4200];
    tool_output_t out[MAX_OUT];
    size_t n = 0;
    for (size_t k = 0; k < n_files && n < MAX_OUT; k++)
        if (files[k].path)
            out[n++] = files[k];
    for (size_t k = 0; curve_dir && k < 3 && n < MAX_OUT; k++) {
        snprintf(names[k], sizeof names[k], "%s/%s", curve_dir, curve_files[k]);
        out[n++] = (tool_output_t){"--memory-curve", names[k]};
    }
    for (size_t k = 0; k < n; k++) {
        if (input_path && tool_same_file(input_path, out[k].path)) {
            fprintf(stderr, "chameleon %s: %s %s is the input (%s %s): it would be "
                    "overwritten; choose another path\n", cmd, out[k].flag, out[k].path,
                    input_flag, input_path);
            return 2;
        }
        for (size_t j = 0; j < k; j++) {
            if (tool_same_file(out[j].path, out[k].path)) {
                fprintf(stderr, "chameleon %s: %s %s and %s %s are the same file; choose "
                        "two paths\n", cmd, out[j].flag, out[j].path, out[k].flag, out[k].path);
                return 2;
            }
        }
    }
    return 0;
}

int tool_check_outputs(const char *cmd, const char *curve_dir, const tool_output_t *files,
                       size_t n_files, const char *input_flag, const char *input_path,
                       bool *made)
{
    *made = false;
    int rc = check_outputs(cmd, curve_dir, files, n_files, input_flag, input_path, made);
    if (rc != 0 && *made)
        rmdir(curve_dir);
    return rc;
}

int tool_parse_capacity(const char *cmd, const char *v, uint64_t *bytes, double *fraction)
{
    size_t n = strlen(v);
    *bytes = 0;
    *fraction = 0;
    if (n > 1 && v[n - 1] == '%') {
        char num[32];
        double pct;
        if (n - 1 >= sizeof num)
            return tool_bad_value(cmd, "--capacity", "a size or a percentage such as 50%", v);
        memcpy(num, v, n - 1);
        num[n - 1] = '\0';
        if (!tool_parse_real(num, 1e-6, 1000, &pct))
            return tool_bad_value(cmd, "--capacity", "a percentage above 0 and at most 1000% "
                                  "such as 50%", v);
        *fraction = pct / 100;
        return 0;
    }
    if (!tool_parse_size(v, bytes) || *bytes == 0 || *bytes > TOOL_MAX_CAPACITY)
        return tool_bad_value(cmd, "--capacity", "a size from 1 byte to 64TiB (the largest "
                              "simulated device) such as 64MiB, or a percentage of the "
                              "unconstrained peak such as 50%", v);
    return 0;
}
