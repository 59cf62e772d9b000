/* /proc values (see procfs.h). */
#include "base/procfs.h"

#include <stdio.h>

long kc_proc_value(const char *path, const char *format)
{
    FILE *f = fopen(path, "r");
    char line[256];
    long value = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, format, &value) == 1)
            break;
    if (f)
        fclose(f);
    return value;
}
