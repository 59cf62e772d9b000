/* libFuzzer target for the .npy parser (kc_npy_parse, from memory).
 *
 * Beyond "no crash, no leak", it checks the parser's contract: a failure
 * leaves *out NULL with a nonempty one-line message, and a success re-encodes
 * (kc_npy_encode_header + the same data) into bytes that parse back to the
 * same dtype, shape and data. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/npy.h"
#include "base/tensor.h"
#include "kerasc.h"

static void kc_npy_fuzz_check_error(const kc_tensor *t)
{
    const char *err = kc_last_error();
    if (t != NULL || err[0] == '\0' || strchr(err, '\n') != NULL)
        abort();
}

/* Save-side encoding of a parsed tensor must parse back to the same. */
static void kc_npy_fuzz_round_trip(const kc_tensor *t)
{
    unsigned char header[1024];
    size_t hlen;
    if (kc_npy_encode_header(t, header, sizeof header, &hlen) != KC_OK)
        abort();
    size_t nbytes = (size_t)kc_tensor_count(t) * kc_dtype_size(kc_tensor_dtype(t));
    unsigned char *image = malloc(hlen + nbytes);
    if (!image)
        return;
    memcpy(image, header, hlen);
    if (nbytes)
        memcpy(image + hlen, kc_tensor_cdata(t), nbytes);
    kc_tensor *back = NULL;
    if (kc_npy_parse(image, hlen + nbytes, &back) != KC_OK)
        abort();
    if (kc_tensor_dtype(back) != kc_tensor_dtype(t) || !kc_shape_equal(&back->shape, &t->shape) ||
        (nbytes && memcmp(kc_tensor_cdata(back), kc_tensor_cdata(t), nbytes) != 0))
        abort();
    kc_tensor_free(back);
    free(image);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kc_tensor *t = NULL;
    if (kc_npy_parse(data, size, &t) != KC_OK) {
        kc_npy_fuzz_check_error(t);
        return 0;
    }
    kc_npy_fuzz_round_trip(t);
    kc_tensor_free(t);
    return 0;
}
