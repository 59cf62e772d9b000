/* A hardened view of an HDF5 file through libhdf5.
 *
 * Keras files are written by h5py; libhdf5 is the reference reader. What
 * this layer adds is distrust: paths are walked one component at a time and
 * only hard links are followed (no soft or external links), datasets with
 * external or virtual storage are refused, and every size is capped before
 * memory is allocated. libhdf5's own error printing is silenced; failures
 * come back as kc_status with a one-line message. */
#ifndef KC_H5_H
#define KC_H5_H

#include <stddef.h>
#include <stdint.h>

#include "base/tensor.h"
#include "kerasc.h"

typedef struct kc_h5 kc_h5;

/* Open a file on disk, read-only. label names it in errors. */
kc_status kc_h5_open_file(const char *path, kc_h5 **out);
/* Open an in-memory image (e.g. a STORED zip member). The buffer is read
 * (by the sandboxed reader) only during the call: the caller may free it
 * as soon as this returns (every dataset is then in the snapshot). */
kc_status kc_h5_open_image(const void *buf, size_t len, const char *label, kc_h5 **out);
/* The same, taking buf (from kc_alloc_array) over, success or not: the
 * reader then leaves datasets stored as float32 in the image and they are
 * copied from it, each one's pages dropped once read (release on read),
 * instead of going through the snapshot. kc_h5_open_file does the same
 * with the file, held open (and checked unchanged since it was parsed). */
kc_status kc_h5_open_image_owned(void *buf, size_t len, const char *label, kc_h5 **out);
/* Whether a dataset's values are read from the file or image itself. */
int kc_h5_dataset_in_source(kc_h5 *h5, const char *path);
void kc_h5_close(kc_h5 *h5);
const char *kc_h5_label(const kc_h5 *h5);

enum { KC_H5_NONE = 0, KC_H5_GROUP = 1, KC_H5_DATASET = 2 };
/* Kind of object at an absolute path ("/layers/dense/vars"), following
 * only hard links. KC_H5_NONE when absent or reached through another link
 * kind. */
int kc_h5_kind(kc_h5 *h5, const char *path);

/* Names of a group's direct children (hard links only), in creation/name
 * order as libhdf5 lists them. Caller frees with kc_strv_free. */
kc_status kc_h5_list(kc_h5 *h5, const char *group_path, char ***names, int *n);

/* 1 if the object at path has the attribute, else 0. */
int kc_h5_has_attr(kc_h5 *h5, const char *path, const char *attr);
/* A string attribute, scalar or 1-D array, fixed- or variable-length,
 * ASCII or UTF-8. Keras's chunked form (attr0, attr1, ... when attr itself
 * is absent) is concatenated. Missing attribute: KC_OK with *n = -1 and
 * *out = NULL. Caller frees with kc_strv_free. */
kc_status kc_h5_attr_strings(kc_h5 *h5, const char *path, const char *attr, char ***out,
                             int *n);
/* A single string attribute (first element); *out = NULL when missing. */
kc_status kc_h5_attr_string(kc_h5 *h5, const char *path, const char *attr, char **out);

/* Shape and stored dtype of a dataset. bfloat16 (opaque 2-byte with a
 * dtype="bfloat16" attribute, as Keras writes it) is KC_BF16. */
kc_status kc_h5_dataset_info(kc_h5 *h5, const char *path, kc_shape *shape, kc_dtype *dtype);
/* Read a whole dataset converted to float32 into dst (count elements,
 * which must equal the dataset's element count). */
kc_status kc_h5_read_f32(kc_h5 *h5, const char *path, float *dst, int64_t count);
/* The loader's single pass: from now on each dataset's bytes are dropped
 * from the snapshot (or an owned image) once kc_h5_read_f32 has copied
 * them out, so it shrinks as the weight arrays grow and the two are never
 * both whole in memory. Reading a dropped dataset again fails; one read
 * from a file reads again. Not with kc_h5_borrow_f32 (the disk tier keeps
 * the snapshot as the weights). */
void kc_h5_release_on_read(kc_h5 *h5);
/* The disk tier: a pointer to the dataset's float32 values inside the
 * (file-backed, read-only) snapshot mapping, which then outlives the
 * kc_h5 (adopted by the spill session, see base/spill.h). */
kc_status kc_h5_borrow_f32(kc_h5 *h5, const char *path, int64_t count, float **out);

void kc_strv_free(char **strings, int n);

#endif
