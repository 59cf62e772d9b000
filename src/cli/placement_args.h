/* The placement options shared by `kerasc run`, `bench` and `summary`:
 *   --device DEV           default compute device (/CPU:0, /GPU:0, ...)
 *   --place RANGE=DEV      a layer range on a device (repeatable)
 *   --variables DEV        where variables live (/CPU:0: host memory, streamed)
 *   --strict-placement     a missing device is an error, not a CPU fallback
 *   --device-memory SIZE   budget per compute device (e.g. 2GiB, 512MiB)
 *   --prefetch-depth N     ring slots for streamed weights (1-8)
 *   --trace FILE           Chrome/Perfetto trace of the run
 *   --stats                per-layer times (and with placement, transfers and the bound)
 *   --microbatch N         run a larger batch as micro-batches of N
 *   --host-memory SIZE     disk tier: weights stay in a disk file, at most SIZE paged in ahead
 *   --spill-dir DIR        where the disk tier's weight file goes ($TMPDIR, /var/tmp)
 *   --winograd-memory SIZE what Winograd convolutions may add to memory */
#ifndef KC_CLI_PLACEMENT_ARGS_H
#define KC_CLI_PLACEMENT_ARGS_H

#include <stddef.h>

#include "kerasc.h"

#define KC_CLI_MAX_PLACE 64

typedef struct kc_cli_placement {
    const char *place[KC_CLI_MAX_PLACE];
    int n_place;
    const char *device, *variables, *trace;
    size_t device_memory;
    int strict, depth, stats;
    long microbatch;
    size_t host_memory;
    int disk;
    const char *spill_dir;
    size_t winograd_memory;
} kc_cli_placement;

#define KC_CLI_PLACEMENT_USAGE                                                              \
    "[--device DEV] [--place FIRST..LAST=DEV ...] [--variables DEV] [--strict-placement] " \
    "[--device-memory SIZE] [--prefetch-depth N] [--microbatch N] [--host-memory SIZE] "    \
    "[--spill-dir DIR] [--winograd-memory SIZE] [--trace FILE] [--stats]"

/* 1: argv[*i] (and its value) consumed, *i advanced past the value;
 * 0: not a placement option; -1: bad value (message printed). */
int kc_cli_placement_arg(const char *cmd, int argc, char **argv, int *i, kc_cli_placement *p);
void kc_cli_placement_apply(const kc_cli_placement *p, kc_session_options *o);
/* The load options the placement implies (the disk tier). */
void kc_cli_placement_load(const kc_cli_placement *p, kc_load_options *o);
/* "2GiB", "512MiB", "64KiB", "1.5GB", "1000000" -> bytes; 0 if malformed. */
int kc_parse_bytes(const char *text, size_t *out);

#endif
