/* On/off switches read from the environment (KC_FUSE=0, KC_LANES=0, ...). */
#ifndef KC_ENV_H
#define KC_ENV_H

/* Whether environment variable `name` is set to "0": the one form every
 * kerasc switch that turns something off takes. */
int kc_env_off(const char *name);

/* Whether `name` is set to "1": the form of a switch that turns on
 * something kerasc does not do by default on this machine. */
int kc_env_on(const char *name);

/* A switch that turns something on or off where kerasc's default differs
 * by machine: 1 where `name` is "1", 0 where it is "0", else `otherwise`. */
int kc_env_switch(const char *name, int otherwise);

#endif
