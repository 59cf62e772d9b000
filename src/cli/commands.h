/* kerasc subcommands: each takes the arguments after its name and returns
 * the process exit status (0 ok, 1 error, 2 usage). */
#ifndef KC_COMMANDS_H
#define KC_COMMANDS_H

int kc_cmd_summary(int argc, char **argv);
int kc_cmd_layers(int argc, char **argv);
int kc_cmd_run(int argc, char **argv);
int kc_cmd_predict(int argc, char **argv);
int kc_cmd_bench(int argc, char **argv);
int kc_cmd_serve(int argc, char **argv);
int kc_cmd_status(int argc, char **argv);
int kc_cmd_plan(int argc, char **argv);
int kc_cmd_keygen(int argc, char **argv);

#endif
