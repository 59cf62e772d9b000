/* Placement options for the CLI (see placement_args.h). */
#include "cli/placement_args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int kc_parse_bytes(const char *text, size_t *out)
{
    static const struct {
        const char *suffix;
        double scale;
    } units[] = {{"", 1},        {"B", 1},      {"KiB", 1024.0}, {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"K", 1e3},
                 {"KB", 1e3},    {"M", 1e6},    {"MB", 1e6},     {"G", 1e9},
                 {"GB", 1e9},    {"T", 1e12},   {"TB", 1e12}};
    char *end;
    double v = strtod(text, &end);
    if (end == text || !isfinite(v) || v <= 0)
        return 0;
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        if (strcasecmp(end, units[u].suffix) != 0)
            continue;
        double bytes = v * units[u].scale;
        if (bytes < 1 || bytes > 1e18)
            return 0;
        *out = (size_t)bytes;
        return 1;
    }
    return 0;
}

static int kc_bad(const char *cmd, const char *why)
{
    fprintf(stderr, "kerasc %s: %s\n", cmd, why);
    return -1;
}

int kc_cli_placement_arg(const char *cmd, int argc, char **argv, int *i, kc_cli_placement *p)
{
    const char *arg = argv[*i];
    if (!strcmp(arg, "--strict-placement")) {
        p->strict = 1;
        return 1;
    }
    if (!strcmp(arg, "--stats")) {
        p->stats = 1;
        return 1;
    }
    static const char *const valued[] = {"--device", "--place", "--variables", "--trace",
                                         "--device-memory", "--prefetch-depth", "--microbatch",
                                         "--host-memory", "--spill-dir", "--winograd-memory",
                                         NULL};
    int k = 0;
    while (valued[k] && strcmp(arg, valued[k]))
        k++;
    if (!valued[k])
        return 0;
    if (*i + 1 >= argc)
        return kc_bad(cmd, "an option needs a value");
    const char *value = argv[++*i];
    switch (k) {
    case 0: p->device = value; break;
    case 1:
        if (p->n_place == KC_CLI_MAX_PLACE)
            return kc_bad(cmd, "too many --place rules");
        p->place[p->n_place++] = value;
        break;
    case 2: p->variables = value; break;
    case 3: p->trace = value; break;
    case 4:
        if (!kc_parse_bytes(value, &p->device_memory))
            return kc_bad(cmd, "--device-memory takes a size such as 2GiB, 512MiB or 1000000");
        break;
    case 6: {
        char *end;
        long m = strtol(value, &end, 10);
        if (*end || m < 1 || m > 1000000)
            return kc_bad(cmd, "--microbatch takes a number from 1 to 1000000");
        p->microbatch = m;
        break;
    }
    case 7:
        if (!kc_parse_bytes(value, &p->host_memory))
            return kc_bad(cmd, "--host-memory takes a size such as 512MiB or 1000000");
        p->disk = 1;
        break;
    case 8:
        p->spill_dir = value;
        p->disk = 1;
        break;
    case 9:
        if (!kc_parse_bytes(value, &p->winograd_memory) || !p->winograd_memory)
            return kc_bad(cmd, "--winograd-memory takes a size above 0, such as 24MiB");
        break;
    default: {
        char *end;
        long d = strtol(value, &end, 10);
        if (*end || d < 1 || d > 8)
            return kc_bad(cmd, "--prefetch-depth takes a number from 1 to 8");
        p->depth = (int)d;
    }
    }
    return 1;
}

void kc_cli_placement_apply(const kc_cli_placement *p, kc_session_options *o)
{
    o->device = p->device;
    o->place = p->n_place ? p->place : NULL;
    o->n_place = p->n_place;
    o->variables = p->variables;
    o->strict_placement = p->strict;
    o->device_memory = p->device_memory;
    o->prefetch_depth = p->depth;
    o->trace_path = p->trace;
    o->microbatch = p->microbatch;
    o->host_memory = p->host_memory;
    o->winograd_memory = p->winograd_memory;
    o->profile = p->stats;
}

void kc_cli_placement_load(const kc_cli_placement *p, kc_load_options *o)
{
    o->disk_weights = p->disk;
    o->spill_dir = p->spill_dir;
}
