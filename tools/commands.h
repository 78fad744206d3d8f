/* The subcommands of the `chameleon` command. Each takes the arguments after
 * its name and returns the process exit status: 0 success, 1 failure,
 * 2 bad usage. */
#ifndef CHAM_TOOLS_COMMANDS_H
#define CHAM_TOOLS_COMMANDS_H

int cmd_demo(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_experiment(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
int cmd_train(int argc, char **argv);

#endif
