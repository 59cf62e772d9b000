/* Bringing a layer's input into this core's caches in one pass in
 * address order before a kernel reads it in its own (kernels/touch.c). */
#ifndef KC_TOUCH_H
#define KC_TOUCH_H

#include <stdint.h>

/* Read one byte of each cache line of [at, at + bytes), in address
 * order. */
void kc_touch(const void *at, int64_t bytes);

/* Whether kernels touch their inputs so (KC_TOUCH=0: not); read as a
 * kernel's state is built. */
int kc_touch_wanted(void);

/* For tests: the cache lines kc_touch has read in this process. */
int64_t kc_touch_lines(void);

#endif
