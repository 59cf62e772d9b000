/* On/off switches read from the environment (KC_FUSE=0, KC_LANES=0, ...). */
#ifndef KC_ENV_H
#define KC_ENV_H

/* Whether environment variable `name` is set to "0": the one form every
 * kerasc switch that turns something off takes. */
int kc_env_off(const char *name);

#endif
