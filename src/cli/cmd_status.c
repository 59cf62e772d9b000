/* `kerasc status --cluster SPEC`: every task and replica, reachable or not,
 * with what it reports (devices, free memory, speed, loaded stages,
 * requests served, errors, rejected messages, refused connections). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/net_args.h"
#include "net/pipeline.h"

int kc_cmd_status(int argc, char **argv)
{
    kc_cli_net n = {0};
    for (int i = 0; i < argc; i++) {
        int r = kc_cli_net_arg("status", argc, argv, &i, &n);
        if (r < 0)
            return 2;
        if (!r) {
            fprintf(stderr, "kerasc status: unexpected argument '%s' (usage: kerasc status "
                            KC_CLI_NET_USAGE ")\n", argv[i]);
            return 2;
        }
    }
    kc_cluster c;
    kc_net_security sec;
    kc_key_list auth = {0};
    kc_net *net = NULL;
    if (kc_cli_net_setup(&n, 0, &c, &sec, &auth) != KC_OK || kc_net_new(&sec, &net) != KC_OK) {
        fprintf(stderr, "kerasc: error: status: %s\n", kc_last_error());
        return 1;
    }
    int down = 0;
    for (int j = 0; j < c.n_jobs; j++)
        for (int t = 0; t < c.jobs[j].n_tasks; t++)
            for (int r = 0; r < c.jobs[j].tasks[t].n_replicas; r++) {
                const kc_cluster_addr *a = &c.jobs[j].tasks[t].replicas[r];
                char text[1024];
                kc_status s = kc_cluster_query(net, a, n.deadline_ms > 0 ? n.deadline_ms : 2000,
                                               0, text, sizeof text, NULL);
                printf("/job:%s/task:%d replica %d %s:%d %s %s\n", c.jobs[j].name, t, r,
                       a->host, a->port, s == KC_OK ? "up" : "DOWN",
                       s == KC_OK ? text : kc_last_error());
                down += s != KC_OK;
            }
    kc_net_free(net);
    kc_key_list_free(&auth);
    return down ? 1 : 0;
}
