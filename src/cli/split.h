/* Turning the command line of a split run into pipeline options: the cuts
 * (--split LAYER,... or --stages K planned against the measured workers)
 * and each stage's task (--place K=/job:NAME/task:N[/GPU:0]; without any
 * --place, stage k runs on /job:worker/task:k). Shared by `run` and `plan`. */
#ifndef KC_CLI_SPLIT_H
#define KC_CLI_SPLIT_H

#include <stdio.h>

#include "cli/net_args.h"
#include "cli/placement_args.h"
#include "net/pipeline.h"

typedef struct kc_cli_split {
    const char *split;   /* "A,B" or NULL */
    int stages;          /* --stages K (0: from --split) */
    int64_t batch;       /* for the planner's shapes */
} kc_cli_split;

/* plan_out: where to print the planner's table (NULL: quiet). */
kc_status kc_cli_split_options(const kc_model *m, const char *model_path, const kc_cli_split *sp,
                               const kc_cli_placement *pl, const kc_cli_net *net,
                               kc_pipeline_options *o, kc_key_list *auth, FILE *plan_out);

#endif
