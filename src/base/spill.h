/* The disk tier: weights that stay in a disk file, mapped read-only, instead
 * of in anonymous memory, so a model larger than RAM still loads and runs
 * (pages come in from disk when a layer's weights are read and are dropped
 * again after use; see runtime/sched.c).
 *
 * During a load with kc_load_options.disk_weights, the HDF5 reader's
 * snapshot (already float32) is written to an unlinked file in the spill
 * directory instead of a memory file, and weights are pointers into its
 * mapping. Mappings are registered process-wide so code that releases
 * weight arrays (kc_wfree) never frees a mapped one. */
#ifndef KC_SPILL_H
#define KC_SPILL_H

#include <stddef.h>

/* Spill mode for loads on this thread (dir NULL: off). */
void kc_spill_begin(const char *dir);
/* End spill mode; the mappings made during it go to *maps (caller owns,
 * release each with kc_spill_unmap). */
void kc_spill_end(void ***maps, size_t **lens, int *n);
/* The current thread's spill directory, or NULL. */
const char *kc_spill_dir(void);
/* An unlinked read-write file in dir, or -1 (errno set). */
int kc_spill_tmpfile(const char *dir);
/* A named read-write file in dir (the caller unlinks `path` once opened
 * by name: libhdf5 cannot open an unlinked file), or -1. */
int kc_spill_named_tmpfile(const char *dir, char *path, size_t path_size);
/* Hand a read-only mapping over to the current spill session. */
int kc_spill_adopt(void *map, size_t len);
void kc_spill_unmap(void *map, size_t len);
/* Does p point into a spill mapping? */
int kc_spill_owns(const void *p);
/* free() for weight arrays: a no-op on mapped ones. */
void kc_wfree(void *p);
/* The same for an array of `bytes`, its pages given back first
 * (kc_mem_free_pages). */
void kc_wfree_pages(void *p, size_t bytes);

#endif
