/* On/off switches read from the environment (see env.h). */
#include "base/env.h"

#include <stdlib.h>
#include <string.h>

int kc_env_off(const char *name)
{
    const char *v = getenv(name);
    return v && !strcmp(v, "0");
}

int kc_env_on(const char *name)
{
    const char *v = getenv(name);
    return v && !strcmp(v, "1");
}

int kc_env_switch(const char *name, int otherwise)
{
    const char *v = getenv(name);
    if (v && !strcmp(v, "1"))
        return 1;
    if (v && !strcmp(v, "0"))
        return 0;
    return otherwise;
}
