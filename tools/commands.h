/* The subcommands of the `chameleon` command. Each takes the arguments after
 * its name and returns the process exit status: 0 success, 1 failure (a
 * file, the run), 2 bad usage (the command line); docs/cli.md. */
#ifndef CHAM_TOOLS_COMMANDS_H
#define CHAM_TOOLS_COMMANDS_H

#include <stdbool.h>

/* Set only by the argument-parsing fuzz target (fuzz/fuzz_cli.c): a command
 * returns once its options are read and checked (0, or 2 for bad usage),
 * before it reads or writes any file or runs anything. Defined in args.c. */
extern bool tool_parse_only;

int cmd_demo(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_experiment(int argc, char **argv);
int cmd_infer(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
int cmd_train(int argc, char **argv);

#endif
