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

/* After the model is loaded: freed blocks of 128 KiB or more go back to
 * the system at once (see main.c). */
void kc_cli_return_buffers(void);

#endif
