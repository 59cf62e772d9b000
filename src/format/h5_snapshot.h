/* The snapshot a sandboxed libhdf5 child hands to kerasc: every group,
 * link, attribute and dataset of an HDF5 file that a Keras loader may
 * read, with datasets already converted to float32.
 *
 * Layout (little-endian): a 64-byte header
 *   "KCH5SNP1", u64 blob_offset, u64 blob_bytes, u64 json_offset, u64 json_bytes
 * then the float32 blob, then a JSON index:
 *   {"label": "...", "objects": [
 *     {"path": "/", "kind": "group", "children": [...], "refused_links": [...],
 *      "attrs": {"name": {"strings": [...]} | {"error": "why"}}},
 *     {"path": "/a/b", "kind": "dataset", "shape": [...], "dtype": "float16",
 *      "offset": <float index into the blob>, "attrs": {...}},
 *     {"path": "/a/d", "kind": "dataset", "shape": [...], "dtype": "float32",
 *      "source_offset": <byte offset of its values in the file or image>},
 *     {"path": "/a/c", "kind": "dataset", "refused": "why"}]}
 * The parent parses this strictly (h5.c); it never trusts the child more
 * than the file. */
#ifndef KC_H5_SNAPSHOT_H
#define KC_H5_SNAPSHOT_H

#include <stddef.h>

#include "kerasc.h"

#define KC_H5_SNAP_MAGIC "KCH5SNP1"
#define KC_H5_SNAP_HEADER 64

/* Child side: open the file (path) or image (buf/len) with libhdf5 and
 * write its snapshot to fd. direct: a dataset whose stored bytes are its
 * float32 values (kc_h5raw_f32_offset) is recorded with its byte offset
 * in the source instead of copied into the blob. */
kc_status kc_h5_dump(const char *path, const void *buf, size_t len, const char *label, int fd,
                     int direct);

#endif
