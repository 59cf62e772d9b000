/* libFuzzer target for device strings and sizes (kc_devspec_parse,
 * kc_parse_bytes is CLI-side and covered by the e2e tests).
 *
 * Contract checked: a failure leaves a nonempty one-line message; a success
 * formats to a canonical string that parses back to the same device, and
 * formatting is idempotent. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "device/devspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[512];
    if (size >= sizeof text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    kc_devspec d;
    if (kc_devspec_parse(text, &d) != KC_OK) {
        const char *err = kc_last_error();
        if (!err[0] || strchr(err, '\n'))
            abort();
        return 0;
    }
    char canon[256], again[256];
    kc_devspec_format(&d, canon, sizeof canon);
    kc_devspec back;
    if (kc_devspec_parse(canon, &back) != KC_OK || !kc_devspec_equal(&d, &back) ||
        back.task != d.task || back.replica != d.replica || strcmp(back.job, d.job))
        abort();
    kc_devspec_format(&back, again, sizeof again);
    if (strcmp(canon, again))
        abort();
    return 0;
}
