/* The `chameleon` command: dispatches to a subcommand, then checks that
 * everything it printed reached standard output. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "args.h"
#include "commands.h"
#include "common/file.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"check", cmd_demo, "check the swap mechanics: a hand-written schedule on a small model"},
    {"devices", cmd_devices, "list the simulated device presets"},
    {"experiment", cmd_experiment, "reproduce one of the paper's experiments in the simulator"},
    {"infer", cmd_infer, "simulate LLM inference (prefill, decode, KV cache offload)"},
    {"plan", cmd_plan, "make a swap policy from a saved profile"},
    {"report", cmd_report, "an HTML page from the JSON of `simulate` or `train --json`"},
    {"simulate", cmd_simulate, "simulate LLM training at paper scale under a memory policy"},
    {"train", cmd_train, "train a GPT model under a device memory budget"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: chameleon COMMAND [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "  %-10s %s\n", "version", "print the library version");
    fprintf(f, "\n`chameleon COMMAND --help` describes a command's options.\n"
               "Exit status (every command): 0 done; 1 failed: a file could not be read or\n"
               "written, or the run failed (out of memory, no policy, a hazard, --verify\n"
               "found a difference); 2 the command line is wrong: an unknown option, a\n"
               "missing or bad value, a model too large for this machine, or arguments that\n"
               "conflict. Nothing runs before the command line is checked (docs/cli.md).\n");
}

/* SIGINT, SIGTERM, SIGHUP: the output files still being written are under
 * temporary names (common/file.h); they go, and the signal then ends the
 * process as it would have. */
static void on_signal(int sig)
{
    cham_out_remove_pending();
    raise(sig);               /* the default action, once this returns */
}

static void catch_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        /* A signal the shell made us ignore (a background job) stays so. */
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN)
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* Standard output is an output like the others: a summary or JSON cut
 * short by a full disk is a failure (exit 1), not a success. */
static int finish_stdout(int rc)
{
    errno = 0;
    int e = 0;
    if (fflush(stdout) != 0)
        e = errno ? errno : EIO;
    else if (ferror(stdout))      /* an earlier write failed, its text dropped */
        e = tool_stdout_errno ? tool_stdout_errno : EIO;
    errno = 0;
    /* EBADF with nothing left to write: stdout was closed (>&-) and the
     * command printed nothing, as gnulib's close_stdout allows. */
    if (fclose(stdout) != 0 && !e && errno != EBADF)
        e = errno ? errno : EIO;
    if (!e)
        return rc;
    fprintf(stderr, "chameleon: cannot write to standard output: %s\n", strerror(e));
    return rc ? rc : 1;
}

static int run(int argc, char **argv);

int main(int argc, char **argv)
{
    catch_signals();
    return finish_stdout(run(argc, argv));
}

static int run(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        if (argc > 2 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
            printf("usage: chameleon version\nPrints the library version.\n");
            return 0;
        }
        if (argc > 2) {
            fprintf(stderr, "chameleon version: unexpected argument \"%s\" (it takes none)\n",
                    argv[2]);
            return 2;
        }
        printf("chameleon %s\n", cham_version());
        return 0;
    }
    /* The old name, for one release (docs/cli.md, "Option names"). */
    if (strcmp(cmd, "demo") == 0) {
        fprintf(stderr, "chameleon: note: `chameleon demo` is now `chameleon check` (`make demo` "
                "runs `chameleon train`); the old name goes in the next release\n");
        return cmd_demo(argc - 2, argv + 2);
    }
    const char *names[sizeof commands / sizeof commands[0] + 1];
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].run(argc - 2, argv + 2);
        names[i] = commands[i].name;
    }
    names[sizeof commands / sizeof commands[0]] = "version";
    const char *near = tool_closest(cmd, names, sizeof names / sizeof names[0]);
    if (near)
        fprintf(stderr, "chameleon: unknown command \"%s\" (did you mean %s?)\n\n", cmd, near);
    else
        fprintf(stderr, "chameleon: unknown command \"%s\"\n\n", cmd);
    usage(stderr);
    return 2;
}
