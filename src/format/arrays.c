#include "base/spill.h"
#include "format/arrays.h"

#include <stdlib.h>

void kc_array_list_free(kc_array_list *list)
{
    if (!list)
        return;
    for (int i = 0; i < list->n; i++) {
        free(list->items[i].name);
        kc_wfree(list->items[i].data);
    }
    free(list->items);
    list->items = NULL;
    list->n = 0;
    list->cap = 0;
}
