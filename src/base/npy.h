/* NumPy .npy files (formats 1.0, 2.0, 3.0): internal entry points.
 *
 * The public kc_tensor_load_npy / kc_tensor_save_npy (kerasc.h) read and
 * write files; kc_npy_parse does the same validation on bytes already in
 * memory, so the fuzzer and any in-memory container (e.g. .npz members)
 * share one parser with the file loader. */
#ifndef KC_NPY_H
#define KC_NPY_H

#include <stddef.h>

#include "kerasc.h"

/* Largest header (the dict text after the length field) accepted. NumPy
 * itself refuses headers over 10000 bytes by default; real headers are
 * under 200 bytes, so anything bigger is a hostile or broken file. */
#define KC_NPY_MAX_HEADER ((size_t)64 * 1024)

/* Parse a complete .npy image: preamble, header and exactly the data the
 * header announces, nothing more. On success *out is a new tensor owning a
 * copy of the data; on failure *out is NULL and the error message (without
 * a file name) says why. */
kc_status kc_npy_parse(const void *buf, size_t len, kc_tensor **out);

/* Everything of a .npy file before the data, as NumPy 1.24 writes it for
 * this tensor (byte-identical, including the growth padding): at most cap
 * bytes into out, the length into *len. Fails for dtypes .npy cannot hold
 * (bfloat16) and for shapes with unknown dimensions. */
kc_status kc_npy_encode_header(const kc_tensor *tensor, unsigned char *out, size_t cap,
                               size_t *len);

/* Wrap a header dict text as NumPy does: magic, version, length field, the
 * dict, spaces and '\n' so that the data starts on a 64-byte boundary.
 * Format 1.0 when the padded dict fits a 16-bit length, else 2.0. Returns
 * the total length, or 0 when it would not fit in cap bytes. */
size_t kc_npy_wrap_header(const char *dict, size_t dict_len, unsigned char *out, size_t cap);

#endif
