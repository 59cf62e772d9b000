/* Direct libhdf5 access (the code behind the sandbox). Only the snapshot
 * dumper (h5_dump.c) calls this, inside a child process: libhdf5 is not
 * hardened against hostile files, so it never runs in kerasc's own
 * process. Same contract as h5.h, on a live libhdf5 handle. */
#ifndef KC_H5_RAW_H
#define KC_H5_RAW_H

#include "format/h5.h"

typedef struct kc_h5raw kc_h5raw;

kc_status kc_h5raw_open_file(const char *path, kc_h5raw **out);
kc_status kc_h5raw_open_image(const void *buf, size_t len, const char *label, kc_h5raw **out);
void kc_h5raw_close(kc_h5raw *h5);
const char *kc_h5raw_label(const kc_h5raw *h5);
int kc_h5raw_kind(kc_h5raw *h5, const char *path);
kc_status kc_h5raw_list(kc_h5raw *h5, const char *group_path, char ***names, int *n);
int kc_h5raw_has_attr(kc_h5raw *h5, const char *path, const char *attr);
kc_status kc_h5raw_attr_strings(kc_h5raw *h5, const char *path, const char *attr, char ***out,
                                int *n);
kc_status kc_h5raw_attr_string(kc_h5raw *h5, const char *path, const char *attr, char **out);
kc_status kc_h5raw_dataset_info(kc_h5raw *h5, const char *path, kc_shape *shape,
                                kc_dtype *dtype);
kc_status kc_h5raw_read_f32(kc_h5raw *h5, const char *path, float *dst, int64_t count);
/* 1, with the byte offset of its values in the file or image, for a
 * dataset whose bytes are its float32 values as they lie: contiguous,
 * little-endian IEEE float32, storage allocated, every byte inside the
 * source. 0 for any other (read it with kc_h5raw_read_f32). */
int kc_h5raw_f32_offset(kc_h5raw *h5, const char *path, uint64_t *offset);

/* Names of the attributes of the object at path. */
kc_status kc_h5raw_attr_names(kc_h5raw *h5, const char *path, char ***names, int *n);
/* Names of a group's links that are not hard links (soft, external,
 * user-defined): recorded so that a path through them is refused with a
 * precise message. */
kc_status kc_h5raw_list_refused(kc_h5raw *h5, const char *group_path, char ***names, int *n);

#endif
