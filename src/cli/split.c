/* Split-run options (see split.h). */
#include "cli/split.h"

#include <stdlib.h>
#include <string.h>

#include "net/calibrate.h"
#include "net/planner.h"
#include "runtime/stage.h"

static kc_status kc_split_cuts(const kc_model *m, const char *split, kc_pipeline_options *o)
{
    char cuts[4096];
    snprintf(cuts, sizeof cuts, "%s", split);
    int n = 0;
    for (char *save = NULL, *c = strtok_r(cuts, ",", &save); c; c = strtok_r(NULL, ",", &save)) {
        if (n + 1 >= KC_PIPELINE_MAX_STAGES)
            return kc_fail(KC_ERR_LIMIT, "more than %d stages", KC_PIPELINE_MAX_STAGES);
        KC_TRY(kc_model_find_cut(m, c, &o->last_node[n]));
        if (n && o->last_node[n] <= o->last_node[n - 1])
            return kc_fail(KC_ERR_ARG, "--split: '%s' is not after the previous cut", c);
        n++;
    }
    o->last_node[n] = kc_model_num_nodes(m) - 1;
    if (n && o->last_node[n - 1] >= o->last_node[n])
        return kc_fail(KC_ERR_ARG, "--split: nothing after the last cut");
    o->n_stages = n + 1;
    return KC_OK;
}

static kc_status kc_split_places(const kc_cli_placement *pl, kc_pipeline_options *o)
{
    int placed[KC_PIPELINE_MAX_STAGES] = {0};
    for (int r = 0; r < pl->n_place; r++) {
        const char *rule = pl->place[r];
        char *end;
        long k = strtol(rule, &end, 10);
        if (end == rule || *end != '=' || k < 0 || k >= o->n_stages)
            return kc_fail(KC_ERR_ARG, "with --cluster, --place takes STAGE=/job:NAME/task:N "
                           "(or STAGE=/CPU:0 to run it here) with STAGE from 0 to %d ('%s')",
                           o->n_stages - 1, rule);
        KC_TRY(kc_devspec_parse(end + 1, &o->place[k]));
        if (!kc_devspec_is_local(&o->place[k]) && o->place[k].task < 0)
            return kc_fail(KC_ERR_ARG, "stage %ld: '%s' names a job but no task "
                           "(/job:NAME/task:N)", k, end + 1);
        placed[k] = 1;
    }
    for (int k = 0; k < o->n_stages; k++) {
        if (placed[k])
            continue;
        if (pl->n_place)
            return kc_fail(KC_ERR_ARG, "stage %d has no --place %d=/job:NAME/task:N", k, k);
        char text[64];
        snprintf(text, sizeof text, "/job:worker/task:%d", k);
        KC_TRY(kc_devspec_parse(text, &o->place[k]));
    }
    return KC_OK;
}

kc_status kc_cli_split_options(const kc_model *m, const char *model_path, const kc_cli_split *sp,
                               const kc_cli_placement *pl, const kc_cli_net *net,
                               kc_pipeline_options *o, kc_key_list *auth, FILE *plan_out)
{
    memset(o, 0, sizeof *o);
    KC_TRY(kc_cli_net_setup(net, 0, &o->cluster, &o->sec, auth));
    o->model_path = model_path;
    o->deadline_ms = net->deadline_ms;
    o->microbatch = pl->microbatch;
    if (sp->split && sp->stages)
        return kc_fail(KC_ERR_ARG, "give either --split or --stages");
    if (sp->split)
        KC_TRY(kc_split_cuts(m, sp->split, o));
    else if (sp->stages)
        o->n_stages = sp->stages;
    else
        return kc_fail(KC_ERR_ARG, "with --cluster, give --split LAYER[,LAYER...] or --stages K");
    KC_TRY(kc_split_places(pl, o));
    if (sp->split)
        return KC_OK;
    kc_plan_worker workers[KC_PIPELINE_MAX_STAGES];
    memset(workers, 0, sizeof workers);
    KC_TRY(kc_plan_calibrate(o, workers));
    kc_split_plan plan;
    int64_t mb = pl->microbatch > 0 && pl->microbatch < sp->batch ? pl->microbatch : sp->batch;
    KC_TRY(kc_plan_split(m, mb, o->n_stages, workers, &plan));
    memcpy(o->last_node, plan.last_node, sizeof plan.last_node);
    if (plan_out)
        kc_split_plan_print(m, &plan, plan_out);
    return KC_OK;
}
