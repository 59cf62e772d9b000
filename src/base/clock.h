/* One monotonic clock for every timing in kerasc (deadlines, stats,
 * traces, benchmarks): seconds since an arbitrary start. */
#ifndef KC_CLOCK_H
#define KC_CLOCK_H

double kc_now(void);

#endif
