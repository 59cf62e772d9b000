#include "base/fpenv.h"

#include "base/env.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>

#define KC_FPENV_FLUSH 0x8040u /* MXCSR's FTZ (bit 15) and DAZ (bit 6) */
/* The control bits (rounding, masks, FTZ, DAZ): the state handed over and
 * restored. The status bits below (the exceptions raised so far) stay each
 * thread's own, as TensorFlow's ScopedRestoreFlushDenormalState leaves them. */
#define KC_FPENV_CONTROL 0xffc0u

unsigned kc_fpenv_get(void) { return _mm_getcsr() & KC_FPENV_CONTROL; }

unsigned kc_fpenv_adopt(unsigned state)
{
    unsigned now = _mm_getcsr();
    if ((now & KC_FPENV_CONTROL) != state)
        _mm_setcsr((now & ~KC_FPENV_CONTROL) | (state & KC_FPENV_CONTROL));
    return now & KC_FPENV_CONTROL;
}

unsigned kc_fpenv_enter(void)
{
    unsigned saved = kc_fpenv_get();
    if (!kc_env_off("KC_FLUSH_DENORMALS"))
        kc_fpenv_adopt(saved | KC_FPENV_FLUSH);
    return saved;
}

void kc_fpenv_leave(unsigned saved) { kc_fpenv_adopt(saved); }

#else /* elsewhere the platform's defaults: no flags to set here */

unsigned kc_fpenv_get(void) { return 0; }
unsigned kc_fpenv_adopt(unsigned state) { return state; }
unsigned kc_fpenv_enter(void) { return 0; }
void kc_fpenv_leave(unsigned saved) { (void)saved; }

#endif
