/* Fuzz the config JSON -> graph path alone (no weights): the densest
 * attack surface, since every layer parses its own config. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/build.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1 << 20))
        return 0;
    cJSON *doc = cJSON_ParseWithLength((const char *)data, size);
    if (!doc)
        return 0;
    for (int major = 2; major <= 3; major++) {
        kc_parse_env env = {.keras_major = major};
        kc_graph *graph = NULL;
        if (kc_build_graph(doc, &env, &graph) == KC_OK)
            kc_graph_free(graph);
    }
    cJSON_Delete(doc);
    return 0;
}
