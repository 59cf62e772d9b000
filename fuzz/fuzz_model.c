/* Fuzz the whole loader: detection, zip, HDF5 layout, config JSON, graph
 * building, shape inference and weight binding. The input is written to a
 * file because formats are detected from files (and directories). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kerasc.h"

/* A hang inside the sandboxed libhdf5 child should cost seconds, not
 * the minute a real file may take (and trip libFuzzer's -timeout). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("KC_SANDBOX_CPU_SECONDS", "5", 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[] = "/tmp/kc_fuzz_model_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        unlink(path);
        return 0;
    }
    close(fd);
    kc_model *model = NULL;
    if (kc_model_load(path, NULL, &model) == KC_OK) {
        FILE *null = fopen("/dev/null", "w");
        if (null) {
            kc_model_summary(model, null, 0);
            kc_model_summary(model, null, 1);
            fclose(null);
        }
        kc_model_free(model);
    }
    unlink(path);
    return 0;
}
