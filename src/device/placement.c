/* Placement rules resolved to one device per node (see placement.h). */
#include "device/placement.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

/* First (or last) node calling the layer named name[0..len), or -1. */
static int kc_find_layer_node(const kc_graph *g, const char *name, size_t len, int last)
{
    int found = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const char *n = g->nodes[i].layer->name;
        if (strlen(n) == len && !strncmp(n, name, len)) {
            found = i;
            if (!last)
                break;
        }
    }
    return found;
}

static kc_status kc_rule_bound(const kc_graph *g, const char *rule, const char *name, size_t len,
                               int last, int *out)
{
    *out = kc_find_layer_node(g, name, len, last);
    if (*out < 0)
        return kc_fail(KC_ERR_ARG, "placement '%s': the model has no layer '%.*s'", rule,
                       (int)len, name);
    return KC_OK;
}

/* "A..B=DEV" → [first, last] node range and the device. */
static kc_status kc_rule_parse(const kc_graph *g, const char *rule, int *first, int *last,
                               kc_devspec *dev)
{
    const char *eq = strrchr(rule, '=');
    if (!eq || eq == rule)
        return kc_fail(KC_ERR_ARG,
                       "placement '%s': expected LAYER=DEVICE or FIRST..LAST=DEVICE", rule);
    KC_TRY(kc_devspec_parse(eq + 1, dev));
    const char *dots = strstr(rule, "..");
    if (dots && dots > eq)
        dots = NULL;
    if (!dots) {
        KC_TRY(kc_rule_bound(g, rule, rule, (size_t)(eq - rule), 0, first));
        *last = kc_find_layer_node(g, rule, (size_t)(eq - rule), 1);
        return KC_OK;
    }
    *first = 0;
    *last = g->n_nodes - 1;
    if (dots > rule)
        KC_TRY(kc_rule_bound(g, rule, rule, (size_t)(dots - rule), 0, first));
    if (dots + 2 < eq)
        KC_TRY(kc_rule_bound(g, rule, dots + 2, (size_t)(eq - dots - 2), 1, last));
    if (*first > *last)
        return kc_fail(KC_ERR_ARG, "placement '%s': the range ends before it starts", rule);
    return KC_OK;
}

kc_status kc_placement_build(const kc_graph *g, const char *default_device,
                             const char *const *rules, int n_rules, const char *variables,
                             kc_placement *out)
{
    memset(out, 0, sizeof *out);
    KC_TRY(kc_devspec_parse(default_device ? default_device : "/CPU:0", &out->default_device));
    if (variables) {
        KC_TRY(kc_devspec_parse(variables, &out->variables));
        out->variables_set = 1;
    }
    out->compute = kc_calloc((size_t)g->n_nodes + 1, sizeof *out->compute);
    if (!out->compute)
        return KC_ERR_NOMEM;
    out->n_nodes = g->n_nodes;
    for (int i = 0; i < g->n_nodes; i++)
        out->compute[i] = out->default_device;
    for (int r = 0; r < n_rules; r++) {
        int first = 0, last = -1;
        kc_devspec dev;
        kc_status st = kc_rule_parse(g, rules[r], &first, &last, &dev);
        if (st != KC_OK) {
            kc_placement_free(out);
            return st;
        }
        for (int i = first; i <= last; i++)
            out->compute[i] = dev;
    }
    return KC_OK;
}

void kc_placement_free(kc_placement *p)
{
    free(p->compute);
    p->compute = NULL;
    p->n_nodes = 0;
}
