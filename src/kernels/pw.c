/* 1x1 convolutions on few output pixels (7x7 and 8x8 images at batch 1:
 * ResNet50's last stage, InceptionV3's 8x8 one, MobileNetV2's last 1x1;
 * strided ones up to 256: ResNet50's block1_0 and block1_1 shortcuts and
 * reductions): kerasc's own product, the output channels split between
 * the threads.
 *
 * There the weights outweigh the image (ResNet50's 7x7 512 -> 2048: 4 MB
 * of weights against 0.1 MB of input) and come from memory on every run
 * (the model's 100 MB stay in no cache), and oneDNN 2.6's brgconv_1x1,
 * on its own threads, has both threads read all of them. Here each thread
 * owns a run of 16-channel output vectors, their kernel packed once at
 * build ([vector][input channel][16]), and reads only those, in panels of
 * up to 3 vectors over all the pixels, register blocks of 8 pixels x 48
 * channels (by pixels, below: 4 vectors, blocks of 6 pixels x 64); the
 * panels come from memory on the hardware's own fetch (the part's next
 * one fetched into L2 as a panel runs, KC_PW_PREFETCH=1, cost time on
 * the Zen 5: kc_pw_build). The parts' cut follows the
 * threads' measured speeds (kc_balance), and a part done early takes
 * panels from the back of the other's run (base/claims.h): the parts'
 * busy times in ResNet50's nine such layers at batch 1 then differed by
 * 102 us a run in all, from 234 (means over 93 runs), but the layers'
 * times stayed level (ten alternating pairs; a chain of 7x7 2048 <-> 512
 * layers too: much of the difference was the second thread's later start). A strided layer's threads first
 * gather the pixels it reads, each all of them into a buffer of its own.
 * On the 2-core Zen 5 of bench/results, ResNet50 batch 1, `--stats`,
 * alternating: its 7x7 1024 -> 2048 shortcut 0.75-0.77 -> 0.62-0.69 ms
 * (oneDNN on the subsampled input, dnnl_conv.c's gather), its 14x14
 * 512 -> 256 reduction 0.24-0.25 -> 0.20-0.21, its 7x7 512 -> 2048 ones
 * 0.39-0.41 -> 0.38-0.39; MobileNetV2's last 1x1 0.175 -> 0.152.
 * Stride-1 images of 14x14 and up run by pixels (below).
 *
 * Larger images without a residual sum run here too, by pixels
 * (kc_pw_rows_wanted): each thread a run of pixels against every panel, a
 * chunk at a time. Not for speed (level with oneDNN: ResNet50 batch 1
 * 0.998-1.001, InceptionV3 0.992, six alternating pairs on the Zen 4)
 * but for the allocations each oneDNN execution makes: ResNet50 350 ->
 * 170 an inference at batch 1, InceptionV3 744 -> 632; MobileNetV2 at
 * batch 8 16 -> 0 (its last 1x1 alone in each lane, kc_pw_build).
 * On the Zen 5 of 12-05 (two 512-bit multiply-add pipes) that path was
 * 3-5% behind oneDNN over ResNet50 at batch 1 (KC_PW_ROWS=0 faster in 6
 * of 6 alternating pairs): the block's loop, its general registers taken
 * by the fetch's counters, loaded its pixels' row pointers back from the
 * stack at every step (10-21 loads for 24 multiply-adds, 75-107
 * instructions a step). Blocks that fetch nothing now loop without those
 * counters (39 instructions a step, no stack), and by pixels in panels
 * of four vectors (kc_pw_panel_width): ResNet50 batch 1 0.979 of the
 * time (6 of 6 pairs faster, 0.958-0.997), batch 8 0.984, level with
 * oneDNN's; InceptionV3 1.014 and 1.008 and MobileNetV2 batch 8 0.998,
 * within the noise; the same output bits.
 *
 * Kernels of several taps that no Winograd kernel takes (strided, or
 * (1, k) / (k, 1) on images too small for wino.c's 1-D kernel) run here
 * on small images as the 1x1 convolution over their taps laid side by
 * side (kc_pw_taps_geometry, kc_pw_gather): InceptionV3's 8x8 layers and
 * its Mixed_6a 96 -> 96, which were 11 of its 13 oneDNN executions a run
 * at batch 1 (allocations 104 -> 24 -> 8, batch 8 192 -> 32 -> 16), time
 * level (the 8x8 ones: batch 1 0.986 over 16 alternating pairs, batch 8
 * 1.005 over 5, the Zen 5 of 12-05). By vectors each thread
 * gathers every pixel's taps into its own buffer: into one shared
 * buffer, half of it from the other core's cache, the (1, 3) layers
 * were ~10% slower than oneDNN's.
 *
 * The sums: over the input channels in order, in chunks of KC_PW_CHUNK,
 * the bias then the residual added after (the residual first where
 * oneDNN would take its direct kernel: kc_pw_residual_order), as
 * oneDNN's: its outputs equal oneDNN's bit for bit, so that no output
 * depends on which of the two ran a layer. One thread (a lane of a
 * batch, a pipeline stage) runs it by pixels (kc_pw_build): by vectors,
 * in a lane of four images, it was 10-30% slower. */
#include "kernels/pw.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "base/balance.h"
#include "base/claims.h"
#include "base/env.h"
#include "base/help.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/conv_geom.h"
#include "kernels/dnnl_common.h"
#include "kernels/dnnl_conv.h"
#include "kernels/dnnl_order.h"
#include "kernels/isa.h"
#include "kernels/prefetchw.h"
#include "kernels/pw_head.h"
#include "kernels/wino.h"
#include "kernels/wino_tx.h"
#include "ops/pool.h"

#define KC_PW_MR 8           /* pixels a register block */
#define KC_PW_NR 48          /* output channels a panel: 3 vectors */
#define KC_PW_MR4 6          /* pixels a register block of a 4-vector panel */
/* At most this many output pixels (images x rows x columns) in a call:
 * beyond that the image outweighs the weights and oneDNN's kernel, which
 * cuts pixels, is level or ahead (ResNet50's 14x14 stride-1 layers, 196
 * pixels, 0.33-0.35 ms against oneDNN's 0.33-0.34); for a strided layer
 * KC_PW_MAX_PIXELS_STRIDED (oneDNN's subsampled or strided input is
 * slower: ResNet50's 14x14 reductions 0.20 against 0.25 ms).
 * Tried on stride-1 images of 196 to 3136 pixels (2026-12-04, ResNet50
 * batch 1, five alternating pairs of `--stats` runs): the panels in
 * passes of 128 input channels, the sums kept between passes, so that a
 * pass's 24 KB of kernel stays in L1: 1.06-1.13x oneDNN's time at 14x14,
 * 1.6-1.9x at 28x28; in one pass (this loop) level with oneDNN at 14x14
 * and 1.5-3x its time at 28x28 and 56x56 (README, Performance); the next
 * block's output lines fetched ahead (PREFETCHW) 0.92-0.99x at
 * 14x14 but 1.07x on the 7x7 512 -> 2048 layers, within the noise over
 * the run.
 * Tried on the Zen 5 of 12-05 (ResNet50, `--stats`, alternating runs,
 * means per layer of each kind), none landed:
 * - by vectors up to 196 pixels (without the fetch's counters): its
 *   14x14 1024 -> 256 0.28-0.29 ms against 0.29-0.30 by pixels, but
 *   256 -> 1024 with a residual sum 0.35-0.36 against 0.32-0.35
 *   (probably: half of each part's residual rows then come from the
 *   other core's cache);
 * - by pixels, the next panel fetched into L2 in a burst at each
 *   block's start: 14x14 256 -> 1024 with a sum 0.351-0.353 against
 *   0.343-0.364, level (the hardware's fetch keeps up with the kernel
 *   coming from memory);
 * - batch 8 (lanes), 56x56 64 -> 256 with a sum (0.39-0.46 ms an image
 *   here, ONNX Runtime's 0.29): the next block's residual lines fetched
 *   a block ahead 0.48-0.49 against 0.46; chunks of 24 pixels 0.41-0.43
 *   against 0.40-0.45, of 6 (each output row's lines in order) 0.37-0.40
 *   against 0.39-0.40;
 * - chunks of up to 640 KB of input rather than KC_PW_CHUNK_BYTES (no
 *   short last chunk that reads the whole kernel for a few pixels): level;
 * - where batch 8 loses to ONNX Runtime: in a lane (one thread, four
 *   images) the residual sums come from memory. Dropping their read (a
 *   timing probe, wrong output) made the 56x56 64 -> 256 layers 0.39 ->
 *   0.29-0.34 ms an image, the 28x28 128 -> 512 ones 0.35 -> 0.26, the
 *   run 16.7 -> 15.5 ms. A block reads 64 bytes of each of its rows per
 *   vector, rows st->n * 4 bytes apart: its reads step by kilobytes and
 *   cross a 4 KB page nearly every block, where the hardware's fetch
 *   stops. Fetching the next block's residual lines (T1) in a lane:
 *   those layers 0.41-0.49 -> 0.38-0.42, but the run 0.976, 0.982,
 *   1.010 and 1.002 of the time over 6, 8, 8 and 10 alternating pairs;
 *   two or four blocks ahead 0.978 and 1.000, into L1 (T0) slower. Apart
 *   (one core, 3132 pixels, 64 -> 256), the residual read cost nothing
 *   when this core had written the sums, 2% from memory, 38% when the
 *   other core had (513 us fetched two blocks ahead, against 664).
 * Tried on the same Zen 5 on 12-06 (ResNet50 batch 1; each layer's wall
 * time and its parts' busy times summed over the 27 layers run by
 * pixels, alternating runs), none landed:
 * - where their time goes: a part starts 2.3-2.9 us after the team is
 *   asked for, the call returns 2.3-2.5 us after the last part ends, and
 *   the parts end 21 us apart on average (15-17 us with the cut in single
 *   pixels rather than blocks of 8, the runs level): the wall time of the
 *   27 is 0.45 ms over their slower parts', 0.1 ms of it the cut;
 * - each part's run claimed a piece at a time (base/claims.h, pieces a
 *   quarter of what is left, a unit a block against one panel), a part
 *   done early taking blocks from the back of the other's run: the parts
 *   then ended within 2-3 us (slower part 0.05-0.08 ms over the mean
 *   over the 27, from 0.29-0.34), but the mean rose by as much (the taken
 *   blocks read the other core's rows and residual sums; with taking off
 *   the mean stayed level): the run 1.000 and 1.002 over 10 + 10 pairs;
 * - each block's own residual lines fetched into L1 as it starts (PREFETCH
 *   T0), or also the output lines of layers without a sum (PREFETCHW):
 *   0.989, 1.003 and 0.992 of the time over 8, 10 and 8 pairs; again
 *   on 12-06 evening, with the residual lines fetched for writing
 *   (PREFETCHW, as inline assembly: GCC turns _MM_HINT_ET0 into
 *   PREFETCHT0 without -mprfchw, so an earlier "PREFETCHW" may have been
 *   a T0), at the block's start 0.989-0.990 and a block ahead 0.997-1.006
 *   (6 + 8 alternating runs), T0 at the start 0.995, a block ahead 1.005.
 *   What the residual's read costs at most: not reading it (a timing
 *   probe, wrong sums) took the layers with a sum from 5.34-5.52 to
 *   4.98-5.43 ms a run (six alternating runs), ~0.3 ms that no fetch
 *   has won back;
 * - the parts going through the panels from different ends (part k from
 *   panel k * panels / parts), so that the second to read a panel finds
 *   it in the other core's cache or L3 rather than memory: 1.001 over 10
 *   pairs (one thread apart, 96 pixels x 1024 outputs took 8-10% longer
 *   than 192 x 512 with the kernel coming from memory: the one kernel
 *   read twice per layer by pixels costs, but not at this size);
 * - the chunks of a part's run evened out (no short last chunk): level.
 * The kernel's own loop (6 pixels x 4 vectors) reaches 190-200 GFLOP/s
 * of the core's 222 on these shapes with its data in cache (one thread,
 * measured apart); in the network each part runs 15-30% slower, and a
 * team's fork and join alone take 2.9 us here.
 * Tried on the same Zen 5 later on 12-06 (ResNet50 batch 1, `--stats`,
 * alternating runs), not landed: by vectors on up to 64 pixels, each
 * panel in passes of 64 to 256 input channels over every block of
 * pixels before the next pass (the sums stored between passes, the same
 * bits), so that the first block no longer reads the whole panel from
 * memory alone: the 7x7 layers 1.02-1.07x the time (8 + 6 runs; passes
 * as long as the 1280-channel chunks also 1.02x, so the cost was the
 * passes' bookkeeping, and nothing was won back: the hardware's fetch
 * already keeps the first block fed).
 * Tried on the same Zen 5 on 12-07 (ResNet50 batch 1): the two parts by
 * pixels meeting where they meet, part 0 from the front and part 1 from
 * the back of one shared range (each first 80% of its cut's share in
 * chunks, then pieces of a quarter of what is left, at least 12 or 24
 * pixels): the threads' idle time at the layers' joins (`--stats`' idle
 * ms) 0.95 -> 0.63 ms a run, but the 1x1 layers level, 8.96-9.15 ms a
 * run against 8.97-9.30 (eight alternating runs): the small pieces'
 * extra passes over the kernel cost what the evener ends saved. Without
 * the first 80% (every piece a quarter of what is left) level or slower.
 * Tried on the same Zen 5 on 12-06 night (alternating runs), none landed:
 * - by pixels, outputs of over 4 MB without a residual sum written with
 *   non-temporal stores (no read of the line before its write): a chain
 *   of 56x56 256 <-> 64 layers at batch 8 1.017 of the time (five runs),
 *   ResNet50 batch 8 1.002 (four). The machine writes 26-27 GB/s with or
 *   without that read (a two-thread write loop) and reads 33-35, and the
 *   next layer then reads the output from memory rather than L3;
 * - by pixels, each 4-vector panel in passes of 128 or 256 input
 *   channels over the chunk's blocks, the sums kept in a buffer of the
 *   thread's between passes (the same bits), so that a panel over more
 *   than 192 channels (64 KB and up) stays in L1: ResNet50 batch 1 1.008
 *   and 1.002 (six runs), batch 8 1.024 and 1.046 (four): the panel read
 *   from L2 at every block is not what these layers wait on;
 * - by pixels, the next panel fetched into L2 as a panel runs (as
 *   KC_PW_PREFETCH by vectors): ResNet50 batch 1's five 14x14 256 -> 1024
 *   layers with a sum 1.72-1.77 -> 1.61-1.71 ms in all, its five
 *   1024 -> 256 ones 1.50-1.59 -> 1.56-1.63, the run level (three runs);
 * - by vectors up to 196 pixels once more (all such layers, or only
 *   those with a sum), with even cuts and no taking, with and without the
 *   next panel's fetch: level.
 * Nor is it the weights coming from memory that the 14x14 layers lose
 * to ONNX Runtime at batch 1 (0.33-0.36 and 0.29-0.31 ms against its
 * 0.28 and 0.28): chains of 14x14 bottleneck blocks at batch 1, run in
 * turns, four blocks (17.6 MB of weights, kept in the last-level cache
 * between runs) and twelve (53 MB, read from memory), took 0.31-0.36
 * against 0.33-0.34 ms on the 256 -> 1024 layers with a sum and
 * 0.27-0.29 against 0.29-0.31 on the 1024 -> 256 ones (three pairs):
 * level. (Unpaired, minutes apart, the two had looked 10-25% apart: the
 * machine's phase.)
 * Tried on the same Zen 5 on 12-07 (ResNet50 batch 1, alternating runs
 * of 40), none landed:
 * - a 1x1 layer by pixels that reads the output of the 1x1 layer before
 *   (a residual block's output and the next block's first 1x1, ten pairs
 *   in ResNet50) run inside it, chunk by chunk, on the rows the chunk
 *   had just written, its output over the first layer's input rows (the
 *   same bits; one team call less a pair): 1.001 and 1.005 of the time
 *   (10 and 12 runs), the pairs' layers level. Run twice in a row (a
 *   probe), the second pass over hot inputs and kernel had taken 10%
 *   less, but the kernel from memory, not the input, was the difference;
 * - each 4-vector panel packed row by row (its vectors side by side, one
 *   stream of 256 bytes a row rather than four of 64): 1.007; a chain of
 *   24 14x14 bottlenecks (48 MB of weights, from memory) 1024 -> 256
 *   0.272 -> 0.303 ms a layer, 256 -> 1024 0.289 -> 0.300;
 * - the next panel fetched into L2 as a panel runs (KC_PW_PREFETCH's
 *   loop) where its kernel has at most 256 (or 128) input channels:
 *   1.025 (1.019);
 * - later on 12-07 (after wino_simd.inc's fused F(4x4) gained from
 *   fetching a pass ahead): by vectors, the next panel fetched a line a
 *   step in the blocks after the panel's first (each of them a share,
 *   no counters in the loop): ResNet50's nine 7x7 1x1 layers 2.54-2.90
 *   against 2.55-2.76 ms a run (8 alternating runs), level; by pixels,
 *   a chunk's residual rows (at most 512 KB) read in address order
 *   before its panels (kernels/touch.c): the 14x14 256 -> 1024 layers
 *   1.53-1.61 against 1.52-1.63 ms, level; blocks of 7 pixels x 4
 *   vectors need 33 vector registers (GCC kept an accumulator on the
 *   stack), not timed. Apart, this file's 6 x 4 loop reaches 208-212
 *   GFLOP/s of the core's ~225 with its data in L1.
 * What the 1x1 layers did lose to memory there was the TLB: the arena,
 *   the workspaces and the packed kernels below 2 MiB on small pages
 *   (base/huge.c). */
#define KC_PW_MAX_PIXELS 64
#define KC_PW_MAX_PIXELS_STRIDED 256
/* A kernel of several taps (kc_pw_taps_geometry), by the output pixels
 * of an image (not of the batch: the kernel an image's layer gets does
 * not depend on the batch's lanes). oneDNN 2.6's brgconv sums such a
 * layer's taps and channels in one chain where its input has few
 * channels for the image's size, and so does this kernel there: on at
 * most KC_PW_MAX_PIXELS_TAPS_SMALL pixels over at most
 * KC_PW_TAPS_MAX_CHANNELS (_1D for (1, k) and (k, 1) kernels), on up to
 * KC_PW_MAX_PIXELS_TAPS (strided) over at most KC_PW_TAPS_MAX_CHANNELS_WIDE
 * (test_pw_taps_layers: the same bits as oneDNN's at 4x4 to 56x56
 * outputs over 64 to 192 channels, 7x7 and 8x8 over up to 384, 1-D over
 * up to 1024); to KC_PW_TAPS_MAX_CHANNELS_ASKED in oneDNN's runs of
 * channels (below). Past those it sums otherwise (a 3x3 over 512
 * channels onto 4x4) in an order not worked out, and the layer stays on
 * oneDNN. Time measured up to 17x17
 * (InceptionV3's Mixed_6a 96 -> 96: 0.15-0.16 ms against oneDNN's
 * 0.17-0.21), hence the bound on larger images. */
#define KC_PW_MAX_PIXELS_TAPS_SMALL 64
#define KC_PW_MAX_PIXELS_TAPS 289
#define KC_PW_TAPS_MAX_CHANNELS 384
#define KC_PW_TAPS_MAX_CHANNELS_1D 1024
#define KC_PW_TAPS_MAX_CHANNELS_WIDE 192
/* From there to this many on larger images, oneDNN's brgconv sums in
 * runs of input channels (one chain over each run's taps, the chains
 * added in order) whose length it picks from the image, the filters and
 * the caches: kernels/dnnl_order.c asks it, running the layer once at
 * build, and the layer stays on oneDNN when no run length gives its bits.
 * InceptionV3's Mixed_6a 288 -> 384 (runs of 272, then 16 on the Zen 5),
 * its last oneDNN execution: level, 1.58-1.82 ms against oneDNN's
 * 1.61-1.80 (batch 1, `--stats`, seven alternating pairs; whole runs
 * 1.007 over 10 pairs at batch 1, 0.998 over 6 at batch 8), and
 * InceptionV3 makes no allocation in a run (8 -> 0 at batch 1, 16 -> 0 at
 * batch 8), the same bits. Held to 384 channels: wider layers were not
 * timed. */
#define KC_PW_TAPS_MAX_CHANNELS_ASKED 384
/* At least this many input and output channels: below, the weights are
 * small enough to stay in cache and the product too thin. By pixels
 * (larger images) KC_PW_MIN_OUTPUTS output channels will do: there each
 * part reads all of them anyway, and InceptionV3's 48-filter reductions
 * on 35x35 (a branch on one thread each) then make no oneDNN call. */
#define KC_PW_MIN_CHANNELS 64
#define KC_PW_MIN_OUTPUTS 16
/* The sums over the input channels run in chunks of this many, each
 * from zero, the chunks' sums then added in order: oneDNN 2.6's AVX-512
 * brgconv_1x1 sums so (found by trying chunk sizes against it; checked
 * with 48 to 4096 input channels, strides 1 to 3: test_pw_layers), and
 * then a layer's output does not depend on which of the two ran it (one
 * thread, a lane of a batch, a pipeline stage take oneDNN's). Summed in
 * one run, ResNet50's 7x7 2048 -> 512 layers differed from oneDNN's by
 * 2.6e-5, so they stayed on oneDNN: 0.36-0.39 ms each at batch 1 on
 * two threads against 0.29-0.34 here (`--stats`, two sets of 6
 * alternating runs, faster in every run). */
#define KC_PW_CHUNK 1280

typedef struct kc_pw_state {
    kc_kernel_state base;
    kc_shape in_shape;
    int64_t pixels, k, n;    /* output pixels, input channels, output channels */
    /* the input's rows and columns, the output's, the stride (strided:
     * the pixels read gathered into rows of k before the product) */
    int64_t in_h, in_w, out_h, out_w, stride;
    /* a kernel of several taps (kc_pw_taps_geometry): its rows and
     * columns, the padding before the image, the input's channels (k is
     * then kh * kw * c, the taps of a pixel gathered side by side) */
    int64_t kh, kw, pad_t, pad_l, c;
    /* the input channels a chain of its sums runs over (kc_pw_sum_chunk):
     * c, or fewer where oneDNN's kernel sums in runs of fewer
     * (kc_dnnl_taps_run); then a pixel's row holds the taps run by run,
     * each run's (kh, kw, channels) side by side */
    int64_t c_run;
    int64_t vectors;         /* of 16 output channels, the last maybe partly zeros */
    float *w;                /* packed: vector v's k rows of 16 at w + k * 16 * v */
    int act;                 /* kc_wino_act's codes; 3: applied by the caller */
    int residual;            /* the output holds a sum to add to */
    int residual_first;      /* ... added before the bias (kc_pw_residual_order) */
    /* by vectors: the part's next panel fetched into L2 as a panel runs
     * (kc_pw_fetch_wanted: by default on Intel's CPUs only), and with a
     * head the Dense rows its channels multiply (KC_PW_HEAD_PREFETCH=0: not) */
    int prefetch_panels, prefetch_head;
    /* those lines two a step over a block's first steps (kc_pw_lead_wanted) */
    int fetch_lead;
    int by_pixels;           /* parts own runs of pixels, not of vectors (kc_pw_rows_wanted) */
    /* alone with a residual sum: each block fetches the next block's
     * residual lines into L1 as it starts (kc_pw_build says why) */
    int fetch_residual;
    int claim_outputs;       /* on a team: each block's output lines fetched for writing first */
    int alone;               /* built for one thread (a lane): by pixels, one part */
    int64_t chunk;           /* by pixels: pixels a pass over every panel */
    int64_t pass;            /* by pixels: input channels a pass of a panel's blocks (0: one) */
    kc_balance cut;          /* parts: runs of vectors (or of pixels), one per thread */
    /* the pooling and Dense run after each panel (kc_conv_attrs.post_head,
     * pw_head.c), the output going to head->conv; NULL without */
    kc_pw_head *head;
    const void *head_for;    /* the Dense layer it was built for */
    /* an average pooling moved after the layer (kc_conv_attrs.pre_pool):
     * the product (bias, no activation) goes to a buffer of the calling
     * thread's, which the pooling, with the activation, reads; its
     * window and the padding before it ("same", stride 1) */
    const void *pool_for;
    int64_t pool_kh, pool_kw, pool_pt, pool_pl;
    int out_act;             /* the activation after the pooling (st->act is then linear) */
} kc_pw_state;

/* Lines fetched into L2 as a panel runs, a share in each block's loop:
 * the part's next panel of the kernel, and with a head the Dense rows
 * this panel's channels multiply right after it. */
typedef struct kc_pw_fetch {
    kc_wino2d_lines run[2];
} kc_pw_fetch;

/* What a part's blocks read and write. */
typedef struct kc_pw_io {
    const kc_pw_state *st;
    const float *in, *bias;
    float *out;
    const float *pooled;  /* with a pooling after: its input (the product), whole */
    float *pool_out;      /* and its output */
    kc_claims *panels; /* the parts' runs of vectors, claimed a panel at a time */
    int *failed;       /* a part found no memory for the rows it gathers (kc_pw_gathered_all) */
    int64_t in_p0;     /* the pixel `in` starts at (a chunk gathered: its first) */
    float *y;          /* with a head: the Dense's output */
} kc_pw_io;

/* ------------------------------------------------------------ geometry */

static int kc_pw_off(void) { return kc_env_off("KC_PW"); }

/* By vectors, the next panel fetched into L2 as a panel runs:
 * KC_PW_PREFETCH=1 or =0, else where the CPU is Intel's (kc_pw_build). */
static int kc_pw_fetch_wanted(void)
{
    return kc_env_switch("KC_PW_PREFETCH", kc_isa_vendor() == KC_CPU_INTEL);
}

/* Larger images (beyond KC_PW_MAX_PIXELS, or _STRIDED): each part owns
 * a run of pixels and reads all of the kernel, a chunk of its pixels
 * against every panel in turn, the chunk's input rows staying in L2
 * (KC_PW_CHUNK_BYTES). Cut by vectors there, each thread read every pixel
 * once per panel from L3 (1.5-3x oneDNN's time at 28x28 and 56x56,
 * above). Why: each oneDNN execution allocates (README, tests/alloc):
 * MobileNetV2's last 1x1 at batch 8 made its 16 allocations an
 * inference, ResNet50's residual 1x1 layers 112 of its 170 at batch 1.
 * The same sums as by vectors and as oneDNN's (test_pw_layers), with a
 * residual sum too where its order is known (kc_pw_residual_order).
 * KC_PW_ROWS=0: all of them stay on oneDNN. */
#define KC_PW_CHUNK_BYTES ((int64_t)192 << 10)
static int kc_pw_rows_wanted(void) { return !kc_env_off("KC_PW_ROWS"); }

/* An average pooling moved after the layer (kc_conv_attrs.pre_pool,
 * kc_fuse_pool_plan: InceptionV3's branch_pool 1x1 layers): "same",
 * stride 1, averaging the real cells only, as oneDNN's pooling, which
 * ran it before (dnnl_conv.c's pooled parts); the product then linear,
 * its activation after the pooling. Why: those layers were two oneDNN
 * executions a run each (18 at batch 1 in InceptionV3), each allocating
 * its argument map. */
static int kc_pw_pool_geometry(const kc_conv_attrs *a, kc_pw_state *st)
{
    const kc_pool_attrs *p = a->pre_pool->attrs;
    if (!p || p->kind != KC_POOL_AVG || p->spatial != 2 || p->global || p->padding != 1 ||
        st->stride != 1 || st->residual || p->strides[0] != 1 || p->strides[1] != 1 ||
        p->pool[0] < 1 || p->pool[1] < 1 || p->pad_before[0] || p->pad_before[1] ||
        p->pad_after[0] || p->pad_after[1])
        return 0;
    st->pool_kh = p->pool[0];
    st->pool_kw = p->pool[1];
    st->pool_pt = (p->pool[0] - 1) / 2; /* TensorFlow's "same": the extra cell after */
    st->pool_pl = (p->pool[1] - 1) / 2;
    st->out_act = st->act;
    st->act = 0;
    return 1;
}

/* A residual sum in the order of the oneDNN kernel that would run the
 * layer whole (kc_dnnl_conv_sum_direct; as ctx->whole runs it, and the
 * team's parts when this kernel does not take them): brgconv_1x1 adds
 * the bias, then the residual; its direct kernel (a wide sum over at
 * most 128 input channels) the residual, then the bias, over the input
 * channels in one chain where there are at most 64 of them (found by
 * trying orders against it: ResNet50's 56x56 64 -> 256 layers). 0 where
 * that order is not known (the direct kernel over more than 64): the
 * layer stays on oneDNN. Without a residual sum, 1. */
static int kc_pw_residual_order(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                                kc_pw_state *st)
{
    st->residual_first = st->residual && kc_dnnl_conv_sum_direct(a, in, out);
    return !st->residual_first || st->k <= 64;
}

/* A 1x1 kernel: unpadded, equal strides. */
static int kc_pw_1x1_geometry(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                              kc_pw_state *st)
{
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] != 1 || a->strides[i] != st->stride || st->stride < 1 ||
            a->dilation[i] != 1 || a->pad_before[i] || a->pad_after[i] ||
            out->dims[1 + i] != (in->dims[1 + i] + st->stride - 1) / st->stride)
            return 0; /* a 1x1 kernel pads nothing: "same" and "valid" agree */
    st->in_h = in->dims[1];
    st->in_w = in->dims[2];
    st->kh = st->kw = 1;
    st->c = st->c_run = in->dims[3];
    return 1;
}

/* A kernel of several taps, equal strides, undilated ("valid" or
 * "same", with any padding fused into it), run as the 1x1 convolution
 * over its taps laid side by side: Keras's (kh, kw, c, n) kernel read as
 * (kh * kw * c, n) is that 1x1 convolution's, and each output pixel's
 * taps are gathered into a row of k (kc_pw_gather; zeros outside the
 * image). Only on images of at most KC_PW_MAX_PIXELS_TAPS output pixels,
 * over few enough channels (above), and without a residual sum, pooling
 * or head. KC_PW_TAPS=0: never. */
static int kc_pw_taps_geometry(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                               kc_pw_state *st)
{
    /* a 2-D kernel of stride 1 is the Winograd kernels' (wino.c,
     * wino_fly.c); the channels' bound is where the sums are oneDNN's */
    int one_d = a->kernel[0] == 1 || a->kernel[1] == 1;
    int64_t pixels = out->dims[1] * out->dims[2], c = in->dims[3];
    /* beyond KC_PW_MAX_PIXELS_TAPS_SMALL strided kernels only: checked so */
    int wide = pixels > KC_PW_MAX_PIXELS_TAPS_SMALL;
    int64_t most = wide    ? KC_PW_TAPS_MAX_CHANNELS_WIDE
                   : one_d ? KC_PW_TAPS_MAX_CHANNELS_1D
                           : KC_PW_TAPS_MAX_CHANNELS;
    /* past `most` (wide): oneDNN's runs asked of it (kc_pw_geometry_of) */
    int64_t asked = wide ? KC_PW_TAPS_MAX_CHANNELS_ASKED : most;
    if (kc_env_off("KC_PW_TAPS") || a->accumulate || a->pre_pool || a->post_head ||
        a->padding == 2 || (st->stride == 1 && (!one_d || wide)) || c < KC_PW_MIN_CHANNELS ||
        c > asked || pixels > KC_PW_MAX_PIXELS_TAPS)
        return 0;
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] < 1 || a->strides[i] != st->stride || st->stride < 1 ||
            a->dilation[i] != 1 || a->pad_before[i] < 0 || a->pad_after[i] < 0 ||
            out->dims[1 + i] < 1)
            return 0;
    int64_t data[2], pad[2];
    kc_conv_window_2d(a, in, out, data, pad);
    if (data[0] < 1 || data[1] < 1)
        return 0;
    st->in_h = data[0];
    st->in_w = data[1];
    st->kh = a->kernel[0];
    st->kw = a->kernel[1];
    st->pad_t = pad[0];
    st->pad_l = pad[1];
    st->c = c;
    st->c_run = c > most ? 0 : c;
    return 1;
}

/* Whether the product reads gathered rows rather than the input: a
 * strided layer's pixels, or the taps of a kernel of several. */
static int kc_pw_gathers(const kc_pw_state *st) { return st->stride > 1 || st->kh * st->kw > 1; }

/* The sums over k run in chunks of this many, as oneDNN's: its
 * brgconv_1x1 in chunks of KC_PW_CHUNK, its brgconv a kernel of several
 * taps in one chain per run of c_run channels (a pixel's row laid out
 * run by run, kc_pw_gather_runs). */
static int64_t kc_pw_sum_chunk(const kc_pw_state *st)
{
    return st->kh * st->kw > 1 ? st->kh * st->kw * st->c_run : KC_PW_CHUNK;
}

/* A plain 2-D convolution, 1x1 (or of several taps: kc_pw_taps_geometry),
 * of at most KC_PW_MAX_PIXELS output pixels in all (NHWC); with a head
 * (post_head), stride 1, one image, no residual sum and an activation
 * of the kernel's own. */
static int kc_pw_geometry_of(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                             kc_pw_state *st)
{
    if (a->kind != KC_CONV_PLAIN || a->spatial != 2 || a->groups != 1 || a->post_dw ||
        a->post_pw || in->rank != 4 || out->rank != 4 || (a->pre_pool && a->post_head))
        return 0;
    st->stride = a->strides[0];
    int taps = a->kernel[0] * a->kernel[1] > 1;
    if (taps ? !kc_pw_taps_geometry(a, in, out, st) : !kc_pw_1x1_geometry(a, in, out, st))
        return 0;
    st->out_h = out->dims[1];
    st->out_w = out->dims[2];
    st->pixels = out->dims[0] * out->dims[1] * out->dims[2];
    st->k = st->kh * st->kw * st->c;
    st->n = out->dims[3];
    int64_t most = kc_pw_gathers(st) ? KC_PW_MAX_PIXELS_STRIDED : KC_PW_MAX_PIXELS;
    if (st->pixels < 1 || st->k < KC_PW_MIN_CHANNELS || st->n < KC_PW_MIN_OUTPUTS ||
        out->dims[0] != in->dims[0])
        return 0;
    st->vectors = (st->n + 15) / 16;
    st->act = kc_wino_act(a->activation);
    st->residual = a->accumulate;
    if (a->pre_pool && !kc_pw_pool_geometry(a, st))
        return 0;
    st->by_pixels = st->pixels > most;
    if (!st->by_pixels && st->n < KC_PW_MIN_CHANNELS)
        return 0;
    if (a->post_head && (st->by_pixels || st->stride != 1 || st->residual || st->act == 3 ||
                         in->dims[0] != 1))
        return 0;
    if (st->by_pixels && ((st->residual && st->stride != 1) || !kc_pw_rows_wanted()))
        return 0;
    if (!kc_pw_residual_order(a, in, out, st))
        return 0;
    /* last, as it builds and runs oneDNN's primitive (once a process) */
    if (!st->c_run && !(st->c_run = kc_dnnl_taps_run(a, in, out)))
        return 0;
    /* by pixels: a pass's rows of input within KC_PW_CHUNK_BYTES (L2),
     * whole register blocks */
    st->chunk = KC_PW_CHUNK_BYTES / (st->k * (int64_t)sizeof(float)) / KC_PW_MR * KC_PW_MR;
    st->chunk = st->chunk < KC_PW_MR ? KC_PW_MR : st->chunk;
    return 1;
}

static int kc_pw_geometry(const kc_exec_ctx *ctx, const kc_conv_attrs *a, kc_pw_state *st)
{
    return kc_pw_geometry_of(a, &ctx->in_shape[0], &ctx->out_shape[0], st);
}

/* The instruction sets this kernel runs on (see kc_pw_conv). */
static int kc_pw_isa_ok(void) { return kc_isa() == KC_ISA_AVX512 && kc_dnnl_avx512(); }

int kc_pw_head_fusable(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                       const kc_layer *gap, const kc_layer *dense)
{
    kc_pw_state probe;
    memset(&probe, 0, sizeof probe);
    kc_conv_attrs with = *a;
    with.post_head = dense;
    return !kc_pw_off() && kc_pw_isa_ok() && kc_pw_geometry_of(&with, in, out, &probe) &&
           kc_pw_head_layers_ok(gap, dense, probe.n);
}

/* ------------------------------------------------------------ build */

static void kc_pw_free(kc_kernel_state *s)
{
    kc_pw_state *st = (kc_pw_state *)s;
    kc_free_weights(st->w);
    kc_pw_head_free(st->head);
    free(st);
}

/* The row of Keras's (kh, kw, c, n) kernel, read as (k, n), that row r
 * of a gathered pixel holds: r itself, but where the sums run over runs
 * of fewer than c channels, run after run (kc_pw_gather_runs). */
static int64_t kc_pw_keras_row(const kc_pw_state *st, int64_t r)
{
    if (st->c_run >= st->c)
        return r;
    int64_t taps = st->kh * st->kw, c0 = r / (taps * st->c_run) * st->c_run;
    int64_t run = st->c - c0 < st->c_run ? st->c - c0 : st->c_run;
    int64_t in_run = r - c0 * taps, tap = in_run / run;
    return tap * st->c + c0 + in_run % run;
}

/* Keras's (1, 1, k, n) kernel into vectors: vector v's k rows of 16
 * floats, one per input channel, zeros past the last output channel. A
 * panel of nv vectors reads nv streams, which keeps the packing the same
 * wherever the parts' cuts move. */
static kc_status kc_pw_pack(const kc_exec_ctx *ctx, kc_pw_state *st)
{
    const float *w = kc_w(ctx, 0);
    if (!w)
        return kc_fail(KC_ERR_UNSUPPORTED, "the 1x1 convolution's kernel is gone");
    st->w = kc_calloc_weights((size_t)(st->k * st->vectors * 16), sizeof *st->w);
    if (!st->w)
        return KC_ERR_NOMEM;
    for (int64_t v = 0; v < st->vectors; v++) {
        int64_t n0 = 16 * v, nn = st->n - n0 < 16 ? st->n - n0 : 16;
        for (int64_t r = 0; r < st->k; r++)
            memcpy(st->w + (v * st->k + r) * 16, w + kc_pw_keras_row(st, r) * st->n + n0,
                   (size_t)nn * sizeof *w);
    }
    return KC_OK;
}

/* ------------------------------------------------------------ run */

/* Activation `act` (kc_wino_act's codes 0-2; 3 is the caller's) on v,
 * zero and six held by the caller (its loop's constants). */
__attribute__((target("avx512f"), always_inline)) static inline __m512
kc_pw_act(__m512 v, int act, __m512 zero, __m512 six)
{
    if (act == 1 || act == 2)
        v = _mm512_max_ps(v, zero);
    if (act == 2)
        v = _mm512_min_ps(v, six);
    return v;
}

/* A block's sums acc (pixels [p0, p0 + mr) x nv vectors from output
 * channel n0, the last vector's lanes `last`) into the output: the
 * residual and the bias added in the layer's order, the activation. */
__attribute__((target("avx512f"), always_inline)) static inline void
kc_pw_block_store(const kc_pw_io *io, int64_t p0, int64_t n0, int mr, int nv, __mmask16 last,
                  __m512 acc[KC_PW_MR][4])
{
    const kc_pw_state *st = io->st;
    int64_t ldc = st->n;
    /* what the stores need, in locals: read through io and st, it was
     * loaded again after each store (an intrinsic's store may alias
     * anything), with the activation's constants */
    float *const out = io->out + p0 * ldc + n0;
    const float *const bias = io->bias ? io->bias + n0 : NULL;
    const int residual = st->residual, residual_first = st->residual_first, act = st->act;
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
    /* Every sum of the block first, its stores (with the activation)
     * after: the residual's loads (from the output's own lines) then
     * never wait behind a store the block has just made to a line 4 KB
     * apart (the rows of ResNet50's 14x14 and 7x7 outputs are 4 and 8 KB
     * long). Against the interleaved loop (load, add, store per vector),
     * on the 2-vCPU Zen 5 of bench/results, 12-06, alternating runs:
     * ResNet50 batch 1 0.984 and 0.991 of the time (faster in 8 of 10
     * runs each time), a chain of six 14x14 1024 -> 256 -> 1024 blocks
     * 0.978 (5 of 6), batch 8 level (1.002, 8 runs). The same operations
     * in the same order: the same bits. */
    #pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nv; j++) {
            __mmask16 mask = j == nv - 1 ? last : (__mmask16)0xFFFF;
            const float *c = out + i * ldc + 16 * j;
            __m512 v = acc[i][j];
            if (residual_first)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, c));
            if (bias)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bias + 16 * j));
            if (residual && !residual_first)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, c));
            acc[i][j] = v;
        }
    #pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nv; j++)
            _mm512_mask_storeu_ps(out + i * ldc + 16 * j, j == nv - 1 ? last : (__mmask16)0xFFFF,
                                  kc_pw_act(acc[i][j], act, zero, six));
}

/* Line l of fetch's two runs (none past their end) fetched into L2. */
__attribute__((always_inline)) static inline void kc_pw_fetch_line(kc_pw_fetch fetch, int64_t l)
{
    if (l < fetch.run[0].n)
        _mm_prefetch(fetch.run[0].at + l * 64, _MM_HINT_T1);
    else if (l < fetch.run[0].n + fetch.run[1].n)
        _mm_prefetch(fetch.run[1].at + (l - fetch.run[0].n) * 64, _MM_HINT_T1);
}

/* One input channel's products into a block's sums: acc[i][j] +=
 * a[i * k] x vector j of b (at b + k * 16 * j), mr pixels x nv vectors. */
__attribute__((target("avx512f"), always_inline)) static inline void
kc_pw_step(__m512 acc[KC_PW_MR][4], const float *a, const float *b, int64_t k, int mr, int nv)
{
    __m512 bv[4];
    #pragma GCC unroll 4
    for (int j = 0; j < nv; j++)
        bv[j] = _mm512_loadu_ps(b + k * 16 * j);
    #pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        __m512 x = _mm512_set1_ps(a[i * k]);
        #pragma GCC unroll 4
        for (int j = 0; j < nv; j++)
            acc[i][j] = _mm512_fmadd_ps(x, bv[j], acc[i][j]);
    }
}

/* Pixels [p0, p0 + mr) x nv vectors from `b` (vector j at b + k * 16 * j; output channels from
 * n0, the last vector's lanes `last`), all k input channels; `fetch`'s
 * lines fetched into L2 (fetching 1: spread over the loop; 2: two a step
 * over its first steps, kc_pw_lead_wanted; 0: none). Inlined with mr, nv
 * and fetching constants, the accumulators stay in registers. */
/* GCC 12 cannot see that `done` is stored (k0 past the first chunk)
 * before it is read (k0 past the second) once the fetch's counters are
 * gone from the loop, and warns. */
#if defined(__GNUC__) && !defined(__clang__) /* clang (the fuzz build) has no such warning */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"), always_inline)) static inline void
kc_pw_block(const kc_pw_io *io, const float *b, int64_t p0, int64_t n0, int mr, int nv,
            __mmask16 last, kc_pw_fetch fetch, int fetching)
{
    const kc_pw_state *st = io->st;
    int64_t k = st->k, sum_chunk = kc_pw_sum_chunk(st);
    __m512 acc[KC_PW_MR][4];
    #pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nv; j++)
            acc[i][j] = _mm512_setzero_ps();
    const float *a = io->in + (p0 - io->in_p0) * k;
    const char *pf0 = fetch.run[0].at, *pf1 = fetch.run[1].at;
    const int64_t n_pf0 = fetch.run[0].n, n_pf = n_pf0 + fetch.run[1].n;
    int64_t issued = 0;
    /* the sums of the chunks before the last (kc_pw_sum_chunk) */
    __attribute__((aligned(64))) float done[KC_PW_MR][4][16];
    for (int64_t k0 = 0; k0 < k; k0 += sum_chunk) {
        int64_t k1 = k - k0 > sum_chunk ? k0 + sum_chunk : k;
        if (k0 > 0) {
            #pragma GCC unroll 8
            for (int i = 0; i < mr; i++)
                #pragma GCC unroll 4
                for (int j = 0; j < nv; j++) {
                    if (k0 > sum_chunk)
                        acc[i][j] = _mm512_add_ps(_mm512_load_ps(done[i][j]), acc[i][j]);
                    _mm512_store_ps(done[i][j], acc[i][j]);
                    acc[i][j] = _mm512_setzero_ps();
                }
        }
        if (fetching == 2) { /* a lead: lines 2kk and 2kk + 1 at step kk, then no fetch */
            int64_t kk = k0, lead = (n_pf + 1) / 2 < k1 ? (n_pf + 1) / 2 : k1;
            for (; kk < lead; kk++, b += 16) {
                kc_pw_fetch_line(fetch, 2 * kk);
                kc_pw_fetch_line(fetch, 2 * kk + 1);
                kc_pw_step(acc, a + kk, b, k, mr, nv);
            }
            for (; kk < k1; kk++, b += 16)
                kc_pw_step(acc, a + kk, b, k, mr, nv);
            continue;
        }
        for (int64_t kk = k0; kk < k1; kk++, b += 16) {
            for (; fetching && issued * k < n_pf * (kk + 1); issued++)
                _mm_prefetch(issued < n_pf0 ? pf0 + issued * 64 : pf1 + (issued - n_pf0) * 64,
                             _MM_HINT_T1);
            kc_pw_step(acc, a + kk, b, k, mr, nv);
        }
    }
    for (int64_t l = 2 * k; fetching == 2 && l < n_pf; l++) /* more lines than two a step */
        kc_pw_fetch_line(fetch, l);
    if (k > sum_chunk) {
        #pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
            #pragma GCC unroll 4
            for (int j = 0; j < nv; j++)
                acc[i][j] = _mm512_add_ps(_mm512_load_ps(done[i][j]), acc[i][j]);
    }
    kc_pw_block_store(io, p0, n0, mr, nv, last, acc);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* CALL(mr_, nv_) with nv_ the constant equal to nv (1 to 4; 4 vectors
 * in blocks of at most KC_PW_MR4 pixels), so that the block inlined for
 * it keeps its accumulators in registers. */
#define KC_PW_BY_NV(mr_, CALL)                                                                     \
    do {                                                                                           \
        if (nv == 4) {                                                                             \
            if (mr_ <= KC_PW_MR4)                                                                  \
                CALL(mr_, 4);                                                                      \
            else                                                                                   \
                __builtin_unreachable();                                                           \
        } else if (nv == 3)                                                                        \
            CALL(mr_, 3);                                                                          \
        else if (nv == 2)                                                                          \
            CALL(mr_, 2);                                                                          \
        else                                                                                       \
            CALL(mr_, 1);                                                                          \
    } while (0)

/* PER_MR(mr_) with mr_ the constant equal to a block's hi - lo pixels
 * (1 to KC_PW_MR). */
#define KC_PW_BY_MR(PER_MR)                                                                        \
    do {                                                                                           \
        switch (hi - lo) {                                                                         \
        case 8: PER_MR(8); break;                                                                  \
        case 7: PER_MR(7); break;                                                                  \
        case 6: PER_MR(6); break;                                                                  \
        case 5: PER_MR(5); break;                                                                  \
        case 4: PER_MR(4); break;                                                                  \
        case 3: PER_MR(3); break;                                                                  \
        case 2: PER_MR(2); break;                                                                  \
        default: PER_MR(1); break;                                                                 \
        }                                                                                          \
    } while (0)

#define KC_PW_BLOCK_NONE(mr_, nv_) kc_pw_block(io, at.b, lo, at.n0, mr_, nv_, at.last, mine, 0)
#define KC_PW_BLOCK_SPREAD(mr_, nv_) kc_pw_block(io, at.b, lo, at.n0, mr_, nv_, at.last, mine, 1)
#define KC_PW_BLOCK_LEAD(mr_, nv_) kc_pw_block(io, at.b, lo, at.n0, mr_, nv_, at.last, mine, 2)

/* Without lines to fetch, a block's loop has none of the fetch's
 * counters: they took the general registers that the pixels' row
 * pointers then got back from the stack at every step. */
#define KC_PW_MRS(mr_)                                                                             \
    do {                                                                                           \
        if ((mine.run[0].n || mine.run[1].n) && st->fetch_lead)                                    \
            KC_PW_BY_NV(mr_, KC_PW_BLOCK_LEAD);                                                    \
        else if (mine.run[0].n || mine.run[1].n)                                                   \
            KC_PW_BY_NV(mr_, KC_PW_BLOCK_SPREAD);                                                  \
        else                                                                                       \
            KC_PW_BY_NV(mr_, KC_PW_BLOCK_NONE);                                                    \
    } while (0)

/* A panel of nv vectors from v0 over pixels [p0, p1), as kc_pw_panel and
 * kc_pw_panel_passes cut it: its first output channel, the last vector's
 * lanes, its packed kernel, and blocks of at most mr pixels, evened out. */
typedef struct kc_pw_panel_at {
    int64_t n0;
    __mmask16 last;
    const float *b;
    int64_t pixels, blocks;
} kc_pw_panel_at;

static inline kc_pw_panel_at kc_pw_panel_cut(const kc_pw_state *st, int64_t v0, int nv, int64_t p0,
                                      int64_t p1)
{
    int64_t rem = st->n - 16 * (v0 + nv - 1);
    int64_t mr = nv == 4 ? KC_PW_MR4 : KC_PW_MR;
    kc_pw_panel_at at = {16 * v0, rem >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rem) - 1),
                         st->w + st->k * 16 * v0, p1 - p0, 0};
    at.blocks = (at.pixels + mr - 1) / mr;
    return at;
}

/* The residual sums a block of pixels [lo, hi) x nv vectors from output
 * channel n0 will read, fetched into L1 (kc_pw_build: fetch_residual). */
static void kc_pw_fetch_sums(const kc_pw_io *io, int64_t lo, int64_t hi, int64_t n0, int nv)
{
    const float *row = io->out + lo * io->st->n + n0;
    for (int64_t r = lo; r < hi; r++, row += io->st->n)
        for (int j = 0; j < nv; j++)
            _mm_prefetch((const char *)(row + 16 * j), _MM_HINT_T0);
}

/* The panel of nv vectors from v0 over pixels [p0, p1), in blocks of at
 * most KC_PW_MR (KC_PW_MR4 for 4 vectors) evened out (as kc_wino_simd's
 * product: a block of one or two pixels has too few accumulator chains
 * to cover the multiply-add's latency); `fetch` (the next panel) a
 * share per block. */
__attribute__((target("avx512f"))) static void kc_pw_panel(const kc_pw_io *io, int64_t v0, int nv,
                                                           kc_pw_fetch fetch, int64_t p0,
                                                           int64_t p1)
{
    const kc_pw_state *st = io->st;
    kc_pw_panel_at at = kc_pw_panel_cut(st, v0, nv, p0, p1);
    for (int64_t blk = 0; blk < at.blocks; blk++) {
        int64_t lo = p0 + at.pixels * blk / at.blocks, hi = p0 + at.pixels * (blk + 1) / at.blocks;
        kc_pw_fetch mine = {{kc_wino2d_lines_share(fetch.run[0], blk, at.blocks),
                             kc_wino2d_lines_share(fetch.run[1], blk, at.blocks)}};
        if (st->fetch_residual && blk + 1 < at.blocks)
            kc_pw_fetch_sums(io, hi, p0 + at.pixels * (blk + 2) / at.blocks, at.n0, nv);
        if (st->claim_outputs) /* the block's output lines, for writing (kc_pw_build) */
            kc_prefetchw_block(io->out + lo * st->n + at.n0, st->n, hi - lo, nv);
        KC_PW_BY_MR(KC_PW_MRS);
    }
}

/* A block's pass over input channels [k0, k1) (kc_pw_panel_passes):
 * pixels [p0, p0 + mr) x nv vectors from `b` (as kc_pw_block's), the
 * sums so far taken from `part` (none at k0 = 0) and left there, or on
 * the last pass (k1 = k) stored as kc_pw_block stores them. Each sum
 * adds its products in kc_pw_block's order: the same bits. */
__attribute__((target("avx512f"), always_inline)) static inline void
kc_pw_pass_block(const kc_pw_io *io, const float *b, int64_t p0, int64_t n0, int mr, int nv,
                 __mmask16 last, int64_t k0, int64_t k1, float *part)
{
    const kc_pw_state *st = io->st;
    int64_t k = st->k;
    __m512 acc[KC_PW_MR][4];
    #pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nv; j++)
            acc[i][j] = k0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(part + (i * 4 + j) * 16);
    const float *a = io->in + (p0 - io->in_p0) * k;
    b += k0 * 16;
    for (int64_t kk = k0; kk < k1; kk++, b += 16)
        kc_pw_step(acc, a + kk, b, k, mr, nv);
    if (k1 == k) {
        kc_pw_block_store(io, p0, n0, mr, nv, last, acc);
        return;
    }
    #pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nv; j++)
            _mm512_store_ps(part + (i * 4 + j) * 16, acc[i][j]);
}

#define KC_PW_PASS_BLOCK(mr_, nv_)                                                                 \
    kc_pw_pass_block(io, at.b, lo, at.n0, mr_, nv_, at.last, k0, k1, part)
#define KC_PW_PASS_MRS(mr_) KC_PW_BY_NV(mr_, KC_PW_PASS_BLOCK)

/* kc_pw_panel by pixels over more input channels than a pass
 * (st->pass): the panel's first st->pass channels over every block of
 * [p0, p1), then the next st->pass, the blocks' sums kept in `parts`
 * (KC_PW_MR x 4 vectors a block) between passes, so that a pass's slice
 * of the panel is read from L1 by every block after the first rather
 * than from L2 (kc_pw_build says where it pays). */
__attribute__((target("avx512f"))) static void kc_pw_panel_passes(const kc_pw_io *io, int64_t v0,
                                                                  int nv, int64_t p0, int64_t p1,
                                                                  float *parts)
{
    const kc_pw_state *st = io->st;
    kc_pw_panel_at at = kc_pw_panel_cut(st, v0, nv, p0, p1);
    for (int64_t k0 = 0, k1; k0 < st->k; k0 = k1) {
        k1 = st->k - k0 > st->pass ? k0 + st->pass : st->k;
        for (int64_t blk = 0; blk < at.blocks; blk++) {
            int64_t lo = p0 + at.pixels * blk / at.blocks;
            int64_t hi = p0 + at.pixels * (blk + 1) / at.blocks;
            float *part = parts + blk * KC_PW_MR * 4 * 16;
            if (k1 == st->k && st->claim_outputs)
                kc_prefetchw_block(io->out + lo * st->n + at.n0, st->n, hi - lo, nv);
            KC_PW_BY_MR(KC_PW_PASS_MRS);
        }
    }
}

/* kc_pw_gather where the sums run over runs of st->c_run channels: each
 * pixel's row holds run after run, each run's taps (kernel row, kernel
 * column, its channels) side by side, zeros for taps outside the image. */
static void kc_pw_gather_runs(const kc_pw_state *st, const float *in, int64_t p0, int64_t p1,
                              float *buf)
{
    int64_t c = st->c;
    for (int64_t p = p0; p < p1; p++) {
        int64_t x = p % st->out_w, y = p / st->out_w % st->out_h, img = p / st->out_w / st->out_h;
        int64_t y0 = y * st->stride - st->pad_t, x0 = x * st->stride - st->pad_l;
        float *to = buf + (p - p0) * st->k;
        for (int64_t c0 = 0; c0 < c; c0 += st->c_run) {
            int64_t run = c - c0 < st->c_run ? c - c0 : st->c_run;
            for (int64_t ky = 0; ky < st->kh; ky++)
                for (int64_t kx = 0; kx < st->kw; kx++, to += run) {
                    int64_t iy = y0 + ky, ix = x0 + kx;
                    if (iy < 0 || iy >= st->in_h || ix < 0 || ix >= st->in_w)
                        memset(to, 0, (size_t)run * sizeof *to);
                    else
                        memcpy(to, in + ((img * st->in_h + iy) * st->in_w + ix) * c + c0,
                               (size_t)run * sizeof *to);
                }
        }
    }
}

/* Output pixels [p0, p1)'s taps into buf, a row of k for each: for
 * each kernel row, its columns' input pixels side by side (zeros for
 * those outside the image), for the product to read as a stride-1 1x1
 * convolution's input. A 1x1 kernel: the strided layer's input pixel.
 * Summed in runs of fewer channels than c: kc_pw_gather_runs. */
static void kc_pw_gather(const kc_pw_state *st, const float *in, int64_t p0, int64_t p1,
                         float *buf)
{
    if (st->c_run < st->c) {
        kc_pw_gather_runs(st, in, p0, p1, buf);
        return;
    }
    int64_t c = st->c, row = st->kw * c;
    for (int64_t p = p0; p < p1; p++) {
        int64_t x = p % st->out_w, y = p / st->out_w % st->out_h, img = p / st->out_w / st->out_h;
        int64_t y0 = y * st->stride - st->pad_t, x0 = x * st->stride - st->pad_l;
        /* the kernel's columns inside the image: [kx0, kx1) */
        int64_t kx0 = x0 < 0 ? -x0 : 0;
        int64_t kx1 = st->in_w - x0 < st->kw ? st->in_w - x0 : st->kw;
        float *to = buf + (p - p0) * st->k;
        for (int64_t ky = 0; ky < st->kh; ky++, to += row) {
            int64_t iy = y0 + ky;
            if (iy < 0 || iy >= st->in_h || kx1 <= kx0) {
                memset(to, 0, (size_t)row * sizeof *to);
                continue;
            }
            const float *from = in + ((img * st->in_h + iy) * st->in_w + x0 + kx0) * c;
            memset(to, 0, (size_t)(kx0 * c) * sizeof *to);
            memcpy(to + kx0 * c, from, (size_t)((kx1 - kx0) * c) * sizeof *from);
            memset(to + kx1 * c, 0, (size_t)((st->kw - kx1) * c) * sizeof *to);
        }
    }
}

/* Part `part`'s panels over all the pixels: its run of vectors, then
 * what is left of the others' (base/claims.h), each panel fetching the
 * next into L2 as it runs where asked (kc_pw_fetch_wanted); with a head,
 * the panel's channels then pooled and multiplied into the Dense's rows
 * for them, fetched as it ran. */
static void kc_pw_vectors_job(void *arg, int part)
{
    const kc_pw_io *in_io = arg;
    const kc_pw_state *st = in_io->st;
    kc_pw_io taps_io;
    const kc_pw_io *io = in_io;
    /* strided or taps: each thread gathers every pixel's row into its
     * own buffer (one buffer shared, each part gathering a share: the
     * (1, 3) layers' product read half its rows from the other core's
     * cache and ran ~10% slower; ResNet50's strided 1x1 layers were
     * level either way, 1.53-1.59 ms against 1.55-1.68 in all for its
     * four at batch 1, four alternating `--stats` runs) */
    if (kc_pw_gathers(st)) {
        float *buf = kc_dnnl_workspace(KC_DNNL_SLOT_SRC,
                                       (size_t)(st->pixels * st->k) * sizeof(float));
        if (!buf) {
            in_io->failed[part] = 1;
            return;
        }
        kc_pw_gather(st, in_io->in, 0, st->pixels, buf);
        taps_io = *in_io;
        taps_io.in = buf;
        io = &taps_io;
    }
    kc_claim next;
    for (kc_claim now = kc_claims_next(io->panels, part, &next); now.count > 0;
         now = kc_claims_next(io->panels, part, &next)) {
        kc_pw_fetch fetch = {{{NULL, 0}, {NULL, 0}}};
        if (st->prefetch_panels && next.count > 0) {
            fetch.run[0].at = (const char *)(st->w + st->k * 16 * next.first);
            fetch.run[0].n = st->k * 16 * next.count * (int64_t)sizeof(float) / 64;
        }
        if (st->prefetch_head && st->head) {
            int64_t bytes;
            fetch.run[1].at = kc_pw_head_rows(st->head, now.first, now.count, &bytes);
            fetch.run[1].n = bytes / 64;
        }
        kc_pw_panel(io, now.first, (int)now.count, fetch, 0, st->pixels);
        if (st->head)
            kc_pw_head_vectors(st->head, now.first, now.count);
    }
}

/* With a head, the second pass of one team (kc_parallel_two, after the
 * panels, which are timed for the cut): each thread a share of the
 * Dense's outputs from every block's sums. Summed by the calling thread
 * alone, after the team, they took 22 us a run in MobileNetV2 (the sums
 * of the other thread's blocks in its L2), the other thread idle. */
static void kc_pw_head_total_job(void *arg, int part)
{
    const kc_pw_io *io = arg;
    kc_pw_head_total(io->st->head, io->y, part, io->st->cut.parts);
}

/* The vectors of the next panel by pixels, `left` of them to go: four
 * (blocks of KC_PW_MR4 pixels), the last ones as 3 + 2 rather than 4 + 1
 * (a one-vector panel has 8 accumulators for 9 loads a step: bound by
 * the loads). Why four: the chunk's input is read once a panel, a
 * quarter fewer times than in panels of three, for the same loads a
 * multiply-add (6 broadcasts and 4 vectors for 24). On the Zen 5 of
 * 12-05, ResNet50 batch 1, four alternating `--stats` runs: its 56x56
 * 256 -> 64 layers (3 + 1 vectors before) 0.29-0.31 -> 0.26-0.28 ms
 * each, oneDNN's 0.27-0.29; its 14x14 256 -> 1024 0.35-0.37 -> 0.34-0.35.
 * Outputs unchanged: a panel's width is not in any sum. */
static int64_t kc_pw_panel_width(int64_t left)
{
    if (left == 5)
        return 3;
    return left < 4 ? left : 4;
}

/* The pixels of a part's chunks at most: st->chunk and a quarter more
 * (kc_pw_chunks). */
static int64_t kc_pw_chunk_most(const kc_pw_state *st) { return st->chunk + st->chunk / 4; }

/* How many chunks a run of `pixels` is cut into, evened out: up to a
 * quarter over st->chunk rather than a short last chunk, which reads the
 * whole kernel again for a few pixels (a 14x14 image's half, 98 pixels
 * of 1024 channels: 49 + 49 rather than 48 + 48 + 2). */
static int64_t kc_pw_chunks(const kc_pw_state *st, int64_t pixels)
{
    int64_t chunks = (pixels + st->chunk - 1 - st->chunk / 4) / st->chunk;
    return chunks < 1 ? 1 : chunks;
}

/* By passes (st->pass): the bytes of a chunk's blocks' sums between
 * passes, KC_PW_MR x 4 vectors a block of at least KC_PW_MR4 pixels. */
static size_t kc_pw_parts_bytes(const kc_pw_state *st)
{
    int64_t blocks = kc_pw_chunk_most(st) / KC_PW_MR4 + 1;
    return (size_t)(blocks * KC_PW_MR * 4 * 16) * sizeof(float);
}

/* The calling thread's buffer for a chunk's gathered pixels into *buf
 * (NULL where the layer gathers none); 0 when it needs one and there is
 * no memory. */
static int kc_pw_chunk_buffer(const kc_pw_state *st, float **buf)
{
    *buf = NULL;
    if (!kc_pw_gathers(st))
        return 1;
    *buf = kc_dnnl_workspace(KC_DNNL_SLOT_SRC,
                             (size_t)(kc_pw_chunk_most(st) * st->k) * sizeof(float));
    return *buf != NULL;
}

/* Pixels [c0, c1) against every panel (kc_pw_panel_width); strided,
 * their input pixels gathered first into buf; over many input channels
 * in passes (st->pass, kc_pw_panel_passes). */
static void kc_pw_chunk(const kc_pw_io *io, float *buf, int64_t c0, int64_t c1)
{
    const kc_pw_state *st = io->st;
    kc_pw_fetch none = {{{NULL, 0}, {NULL, 0}}};
    kc_pw_io chunk = *io;
    if (buf) { /* the product reads pixel p at buf + (p - c0) * k */
        kc_pw_gather(st, io->in, c0, c1, buf);
        chunk.in = buf;
        chunk.in_p0 = c0;
    }
    float *parts = st->pass ? kc_dnnl_workspace(KC_DNNL_SLOT_SCRATCHPAD, kc_pw_parts_bytes(st))
                            : NULL;
    for (int64_t v0 = 0, nv; v0 < st->vectors; v0 += nv) {
        nv = kc_pw_panel_width(st->vectors - v0);
        if (parts)
            kc_pw_panel_passes(&chunk, v0, (int)nv, c0, c1, parts);
        else
            kc_pw_panel(&chunk, v0, (int)nv, none, c0, c1);
    }
}

/* By pixels: part `part`'s run of pixels, a chunk at a time against
 * every panel (kc_pw_panel_width); strided, each chunk's input pixels
 * gathered first into this thread's buffer. */
static void kc_pw_pixels_job(void *arg, int part)
{
    const kc_pw_io *io = arg;
    const kc_pw_state *st = io->st;
    int64_t p_lo = st->cut.lo[part], p_hi = st->cut.lo[part + 1];
    float *buf;
    if (!kc_pw_chunk_buffer(st, &buf)) {
        io->failed[part] = 1;
        return;
    }
    int64_t pixels = p_hi - p_lo, chunks = kc_pw_chunks(st, pixels);
    for (int64_t j = 0; j < chunks; j++)
        kc_pw_chunk(io, buf, p_lo + pixels * j / chunks, p_lo + pixels * (j + 1) / chunks);
}

/* Alone with idle lanes to help (base/help.h): the chunks of every pixel
 * claimed one at a time, this lane's thread from the front of its run,
 * the helpers from theirs and then from the back of the others'. Each
 * chunk is computed as kc_pw_pixels_job computes it: the same bits. */
typedef struct kc_pw_help {
    const kc_pw_io *io;
    kc_claims chunks;
} kc_pw_help;

static long kc_pw_help_job(void *arg, int part)
{
    kc_pw_help *h = arg;
    const kc_pw_state *st = h->io->st;
    float *buf;
    if (!kc_pw_chunk_buffer(st, &buf)) {
        h->io->failed[part] = 1;
        return 0;
    }
    long ran = 0;
    kc_claim next;
    for (kc_claim c = kc_claims_next(&h->chunks, part, &next); c.count > 0;
         c = kc_claims_next(&h->chunks, part, &next))
        for (int64_t i = c.first; i < c.first + c.count; i++, ran++) {
            int64_t c0 = i * st->chunk, c1 = c0 + st->chunk;
            kc_pw_chunk(h->io, buf, c0, c1 < st->pixels ? c1 : st->pixels);
        }
    return ran;
}

/* io's layer cut into `parts` runs of chunks, this thread's the first,
 * the others posted for the idle lanes. */
static void kc_pw_run_helped(const kc_pw_io *io, int parts)
{
    const kc_pw_state *st = io->st;
    kc_balance cut;
    kc_balance_init(&cut, (st->pixels + st->chunk - 1) / st->chunk, parts, 1);
    kc_pw_help h = {io, {0}};
    kc_claims_init(&h.chunks, &cut, 1);
    h.chunks.steal = 1; /* this thread takes what no helper came for */
    kc_help_task task = {.fn = kc_pw_help_job, .arg = &h, .parts = cut.parts};
    kc_help_open(&task);
    kc_pw_help_job(&h, 0);
    kc_help_close(&task);
}

/* By pixels on a team, input channels a pass of a panel's blocks
 * (kc_pw_panel_passes), 0 for one pass: KC_PW_PASS channels where set
 * (0: never), else KC_PW_PASS_CHANNELS on Intel's CPUs where the kernel
 * is at least KC_PW_PASS_MIN_BYTES; passes only over more input channels
 * than a pass. Only where the sums run in one chunk (kc_pw_sum_chunk)
 * and on a team (a lane's blocks read their residual lines ahead).
 * Why, on a 2-vCPU Sapphire/Emerald Rapids Xeon (12-07, build/envab,
 * ResNet50 batch 1, ABBA, both orders): passes of 128 channels made its
 * 14x14 1x1 layers (1 MB kernels, 1024 -> 256 and 256 -> 1024) 0.97-0.98
 * of the time and its 28x28 512 -> 128 ones 0.99, the run 0.987, 0.989
 * and 0.991 in three sets of 160-240 pairs (119-174 faster), but its
 * 56x56 256 -> 64 ones (64 KB kernels) 1.03; passes of 192 or 256: level,
 * of 64: 0.994. A pass's slice of a 4-vector panel (128 x 64 floats, 32
 * KB) is then read from L1 by every block after the first. On the Zen 5
 * of 12-06 passes of 128 or 256 had been level or slower (pw.c's notes
 * above). oneDNN's brgconv took 0.84-0.92 of this kernel's time on the
 * layers without a residual sum there, with their kernels from memory
 * (level or slower when the kernels stay in the last-level cache: a
 * chain of four 14x14 blocks, 1.11), and is not what runs them for its
 * allocations (334 an inference, none here). */
#define KC_PW_PASS_CHANNELS 128
#define KC_PW_PASS_MIN_BYTES ((int64_t)512 << 10)
static int64_t kc_pw_pass_wanted(const kc_pw_state *st)
{
    if (!st->by_pixels || st->alone || st->k > kc_pw_sum_chunk(st))
        return 0;
    const char *env = getenv("KC_PW_PASS");
    int64_t pass = env ? atoll(env) : KC_PW_PASS_CHANNELS;
    if (!env && (kc_isa_vendor() != KC_CPU_INTEL ||
                 st->k * st->n * (int64_t)sizeof(float) < KC_PW_PASS_MIN_BYTES))
        return 0;
    return pass > 0 && st->k > pass ? pass : 0;
}

/* Whether a block's lines to fetch (the next panel's, a head's Dense
 * rows) go two a step over its first steps, its other steps then without
 * a fetch, rather than spread over all its steps by a counter: where the
 * CPU is Intel's, or as KC_PW_FETCH_LEAD=1 / =0 says. The counter cost the
 * loop an integer multiply, a compare and a branch a step and the
 * general registers it needed (8-10 loads from the stack a step, 72-74
 * instructions for 24 multiply-adds, against 38-39 without a fetch). On
 * a 2-vCPU Sapphire/Emerald Rapids Xeon (12-07, build/envab, ResNet50
 * batch 1, both orders of 120 pairs): its 7x7 1x1 layers 0.905-0.953 of
 * the time, its strided 14x14 shortcut 0.894, the run 0.983 (201 of 240
 * pairs faster). The same sums: the same bits. */
static int kc_pw_lead_wanted(void)
{
    return kc_env_switch("KC_PW_FETCH_LEAD", kc_isa_vendor() == KC_CPU_INTEL);
}

/* The state for geometry *probe: the kernel packed, the cut even. */
static kc_status kc_pw_build(const kc_exec_ctx *ctx, const kc_pw_state *probe, kc_pw_state **out)
{
    kc_pw_state *st = kc_calloc(1, sizeof *st);
    if (!st)
        return KC_ERR_NOMEM;
    *st = *probe;
    st->base.free = kc_pw_free;
    st->in_shape = ctx->in_shape[0];
    /* The next panel's fetch, a share of its lines in each block's loop,
     * paid on the Zen 4 this kernel was written on; on the Zen 5 of
     * bench/results (12-06) it cost time: ResNet50 at batch 1, its nine
     * layers by vectors (7x7 and strided 14x14) 3.71 -> 3.48 ms without
     * it (0.935, faster in 10 of 10 alternating pairs), the run 0.986 (7
     * of 10); InceptionV3 0.974 (5 of 8), MobileNetV2 level (0.995).
     * The hardware's own fetch keeps up with the panels' one stream.
     * Tried again on 12-06 night with the fetch issued between stretches
     * of 16 steps of the block's loop (the loop itself then as tight as
     * without a fetch), alternating runs: ResNet50's nine layers by
     * vectors at batch 1 2.45-2.67 ms a run against 2.35-2.56 without; a
     * chain of twelve 7x7 2048 <-> 512 bottlenecks without the 3x3 (96 MB
     * of weights, from memory) 0.318-0.326 / 0.303-0.307 ms a layer
     * against 0.295-0.315 / 0.288-0.314. The same chain of two blocks (16
     * MB, kept in the last-level cache) runs them in 0.27-0.28 / 0.26-0.27:
     * memory costs those layers 15-23%, but not as a first block waiting
     * for its panel, which the fetch would hide.
     * On Intel's (a 2-vCPU Xeon of family 6 model 207, Sapphire/Emerald
     * Rapids, 12-07: ~20 GB/s from memory for two cores, ~10 for one) it
     * pays: ResNet50 at batch 1, both sessions in one process, run in
     * turns (ABBA) 120 times, each order once: its 7x7 1x1 layers
     * (1x1a, 1x1b, shortcut) 0.880 / 0.865 / 0.838 and 0.887 / 0.843 /
     * 0.825 of the time, the strided 14x14 ones level (1.000, 0.995),
     * the run 0.987 and 0.968. So on by default where the CPU is Intel's;
     * KC_PW_PREFETCH=1 / =0 says otherwise anywhere. Tried there too and
     * not kept: by pixels, each panel fetching the next as it runs (all
     * chunks, or a part's first chunk only, where the panels come from
     * memory): the 14x14 layers 0.91-0.97 but the 56x56 and 28x28 ones
     * with a residual sum 1.02-1.08, the run level (0.986, 0.967 with the
     * by-vectors fetch in both); chunks of 512 KB rather than 192: level. */
    st->prefetch_panels = kc_pw_fetch_wanted();
    st->prefetch_head = !kc_env_off("KC_PW_HEAD_PREFETCH");
    st->fetch_lead = kc_pw_lead_wanted();
    /* By pixels on a team (images larger than the caches' share of a
     * thread), each block asks for its output lines for writing as it
     * starts (kernels/prefetchw.h), a block's multiply-adds before its
     * stores (and its residual loads), rather than each store waiting on
     * its line at the block's end. On the Zen 5 of bench/results (12-07,
     * alternating runs), ResNet50 at batch 1: 0.986 of the time (8 runs),
     * faster in 5 of 5 `--stats` pairs (21.23-21.51 -> 20.93-21.48 ms in
     * a slow phase; its 14x14 256 -> 1024 layers with their sums 2.25-2.34
     * -> 2.15-2.28 ms in all); the next block's lines rather than its
     * own, level (0.999). Earlier sessions had measured 0.989-0.992 with
     * the residual's lines and not kept it (pw.c's notes above). Alone, a
     * lane fetches the next block's residual lines instead (below).
     * KC_PW_PREFETCHW=0: not. */
    st->claim_outputs = st->by_pixels && kc_parallel_width() >= 2 && !kc_env_off("KC_PW_PREFETCHW");
    /* alone (one thread, a lane): by pixels in one part, strided pixels
     * gathered into the thread's own buffer. The lanes share the state; a
     * state built for the team is built again for a lane (kc_pw_conv).
     * One thread takes every layer the team does. Why: a lane's oneDNN
     * executions allocate as the team's do (MobileNetV2's last 1x1 at
     * batch 8, lanes of four 7x7 images: 16 allocations an inference);
     * there it ran 0.95 of oneDNN's time, ResNet50's 7x7 2048 -> 512 ones
     * 0.99-1.00. Held until 12-05 to stride 1 without a residual sum and
     * 256 pixels, from per-layer timings in ResNet50's lanes (its 14x14
     * to 56x56 ones 1.02-1.12, its 7x7 ones with a residual sum
     * 1.03-1.05, its strided shortcut 1.04); on the Zen 4 whole runs were
     * level without the bounds (alternating pairs: ResNet50 batch 8 1.003
     * and 1.010 for any size, then 1.000 with residual and strided layers
     * too, one thread at batch 1 1.001; InceptionV3 batch 8 0.999, batch
     * 1 0.998), the same bits (the residual in the order of the oneDNN
     * kernel the lane's layer would take, kc_pw_residual_order), and
     * allocations an inference ResNet50 b8 1464 -> 944 -> 64, InceptionV3
     * b8 2920 -> 2232, b1 632 -> 488. */
    const kc_conv_attrs *a = ctx->layer->attrs;
    st->alone = kc_parallel_width() < 2;
    /* Alone (a lane of a batch: its images on one thread), a layer's
     * residual sums come from L3 or memory: the block's loads of them
     * wait at its end, where nothing else is left to run. Each block now
     * fetches the next one's residual lines into L1 as it starts, a
     * block's compute ahead of their use. On the Zen 5 of bench/results
     * (12-06 night, alternating runs): ResNet50 at batch 8 in a slow
     * phase (19 ms an image) 0.963 and 0.950 of the time (8 of 8 runs
     * faster in both sets), in a fast one (15 ms) 0.993 and 1.003 (6 and
     * 8 runs): the fetch wins back what the slow phases' memory costs;
     * two blocks ahead 0.959; into L2 (T1) or for writing (PREFETCHW)
     * 1.2-1.3% slower than into L1; MobileNetV2 batch 8 0.982 and
     * InceptionV3 batch 8 0.995 (few or no such layers). On two threads
     * (batch 1, each part's residual rows in its own L2 from the layer
     * before) 1.011, so only alone. Earlier tries (pw.c's notes above:
     * T1, a block ahead, 0.976-1.010 over the run) were before the
     * lanes' image-major head. KC_PW_RESIDUAL_FETCH=0: not. */
    st->fetch_residual = st->residual && st->alone && !kc_env_off("KC_PW_RESIDUAL_FETCH");
    if (st->alone && !a->post_head)
        st->by_pixels = 1;
    st->pass = kc_pw_pass_wanted(st);
    /* By pixels the cut falls on any pixel (kc_pw_panel evens a part's
     * blocks out), each part at least a block's. Cut in blocks of
     * KC_PW_MR pixels, a 14x14 image's halves (12.25 blocks each) could
     * only be 12 + 13: the cut moved between the two each run, the
     * parts ~30 us apart in each of ResNet50's 256 -> 1024 layers there
     * (batch 1, two threads, the Zen 5 of bench/results, 12-07); cut by
     * pixels 12-16 us apart, the eleven 14x14 layers 3.54 -> 3.47 ms in
     * all (two runs of 100, each layer's mean: -2%). */
    if (st->by_pixels)
        kc_balance_init(&st->cut, st->pixels, kc_parallel_width(), KC_PW_MR);
    else
        kc_balance_init(&st->cut, st->vectors, kc_parallel_width(), 4);
    kc_status packed = kc_pw_pack(ctx, st);
    st->head_for = a->post_head;
    st->pool_for = a->pre_pool;
    if (packed == KC_OK && a->post_head)
        packed = kc_pw_head_new(a->post_head, st->n, st->pixels, &st->head);
    if (packed != KC_OK) {
        kc_pw_free(&st->base);
        return packed;
    }
    st->base.weights_cached = 1; /* the packed kernel is the one read now */
    *out = st;
    return KC_OK;
}

/* With a pooling after: output pixel (img, y, x)'s average over the
 * real cells of its window in `in` (the product), window row by window
 * row, each from left to right, from zero, then divided by the count
 * (oneDNN's avg_exclude_padding, which ran it before: the same bits,
 * test_pw_layers), then the activation. */
__attribute__((target("avx512f"))) static void kc_pw_pool_pixel(const kc_pw_state *st,
                                                                const float *in, int64_t img,
                                                                int64_t y, int64_t x, float *o)
{
    int64_t h = st->out_h, w = st->out_w, n = st->n;
    int64_t y0 = y - st->pool_pt, x0 = x - st->pool_pl;
    int64_t y1 = y0 + st->pool_kh, x1 = x0 + st->pool_kw;
    y0 = y0 < 0 ? 0 : y0;
    x0 = x0 < 0 ? 0 : x0;
    y1 = y1 > h ? h : y1;
    x1 = x1 > w ? w : x1;
    __m512 cells = _mm512_set1_ps((float)((y1 - y0) * (x1 - x0)));
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 m = n - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - c)) - 1);
        __m512 sum = _mm512_setzero_ps();
        for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++)
                sum = _mm512_add_ps(
                    sum, _mm512_maskz_loadu_ps(m, in + ((img * h + iy) * w + ix) * n + c));
        sum = _mm512_div_ps(sum, cells);
        _mm512_mask_storeu_ps(o + c, m, kc_pw_act(sum, st->out_act, zero, six));
    }
}

/* Part `part`'s share of the output rows (images x rows) pooled. */
static void kc_pw_pool_job(void *arg, int part)
{
    const kc_pw_io *io = arg;
    const kc_pw_state *st = io->st;
    int64_t rows = st->pixels / st->out_w, parts = st->cut.parts;
    for (int64_t r = rows * part / parts; r < rows * (part + 1) / parts; r++)
        for (int64_t x = 0; x < st->out_w; x++)
            kc_pw_pool_pixel(st, io->pooled, r / st->out_h, r % st->out_h, x,
                             io->pool_out + (r * st->out_w + x) * st->n);
}

/* With a pooling after: where the product goes (the calling thread's
 * buffer), NULL without one (or without memory: *failed). */
static float *kc_pw_pool_buffer(const kc_pw_state *st, int *failed)
{
    *failed = 0;
    if (!st->pool_for)
        return NULL;
    float *buf = kc_dnnl_workspace(KC_DNNL_SLOT_DST, (size_t)(st->pixels * st->n) * sizeof(float));
    *failed = !buf;
    return buf;
}

/* Then the pooling from it into the output. */
static void kc_pw_pool_after(kc_pw_io *io, float *buf, float *out)
{
    io->pooled = buf;
    io->pool_out = out;
    kc_parallel(io->st->cut.parts, kc_pw_pool_job, io);
}

/* Whether each of `parts` parts found memory for the rows it gathers
 * (failed[part] set where not). */
static kc_status kc_pw_gathered_all(const int *failed, int parts)
{
    for (int k = 0; k < parts; k++)
        if (failed[k])
            return kc_fail(KC_ERR_NOMEM, "out of memory for a convolution's gathered inputs");
    return KC_OK;
}

/* By pixels: the parts' runs, timed, the cut moved by their speeds
 * (one part, as in a lane: the states are shared, nothing to move). */
static kc_status kc_pw_run_pixels(const kc_exec_ctx *ctx, kc_pw_state *st, int *handled,
                                  int *act_done)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    int failed[KC_BALANCE_MAX_PARTS] = {0};
    int no_buffer;
    float *pool_buf = kc_pw_pool_buffer(st, &no_buffer);
    if (no_buffer)
        return kc_fail(KC_ERR_NOMEM, "out of memory for a 1x1 convolution's pooling buffer");
    kc_pw_io io = {st, ctx->in[0], a->use_bias ? kc_w(ctx, 1) : NULL,
                   pool_buf ? pool_buf : ctx->out[0], NULL, NULL, NULL, failed, 0};
    double seconds[KC_BALANCE_MAX_PARTS] = {0};
    int helpers = st->cut.parts == 1 ? kc_help_parts() : 1;
    if (helpers > 1)
        kc_pw_run_helped(&io, helpers);
    else
        kc_parallel_timed(st->cut.parts, kc_pw_pixels_job, &io, seconds);
    KC_TRY(kc_pw_gathered_all(failed, helpers > 1 ? helpers : st->cut.parts));
    if (st->cut.parts > 1)
        kc_balance_update(&st->cut, seconds);
    if (pool_buf)
        kc_pw_pool_after(&io, pool_buf, ctx->out[0]);
    *handled = 1;
    *act_done = (pool_buf ? st->out_act : st->act) != 3;
    return KC_OK;
}

kc_status kc_pw_conv(const kc_exec_ctx *ctx, int *handled, int *act_done)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    *handled = 0;
    *act_done = 0;
    if (!ctx->state)
        return KC_OK;
    kc_pw_state *st = (kc_pw_state *)*ctx->state;
    int mine = st && st->base.free == kc_pw_free;
    /* AVX-512 code whose sums equal those of oneDNN's AVX-512 brgconv:
     * only where kerasc's instruction set is AVX-512 and oneDNN's is too
     * (ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 CPU made oneDNN sum in
     * another order, 7.6e-7 apart on 1024 -> 256) */
    if (ctx->w_ext || ctx->whole || kc_pw_off() || !kc_pw_isa_ok()) {
        if (mine)
            kc_kernel_state_drop(ctx);
        return KC_OK;
    }
    /* a state built for the team is not a lane's (a lane's image has the
     * shape of a batch of one, and a lane's state runs by pixels in one
     * part), nor the reverse */
    if (!mine || !kc_shape_equal(&st->in_shape, &ctx->in_shape[0]) ||
        st->head_for != (const void *)a->post_head || st->pool_for != (const void *)a->pre_pool ||
        st->alone != (kc_parallel_width() < 2)) {
        kc_pw_state probe;
        memset(&probe, 0, sizeof probe);
        int takes = kc_pw_geometry(ctx, a, &probe);
        /* a state of this kernel for another shape goes; another kernel's
         * (built for another shape, or while this one was off) goes only
         * where this kernel takes the layer, so that the kernel a shape
         * gets does not depend on the runs before (batch 1, then 2, then 1
         * again: oneDNN's state from batch 2 kept the layer, and its output
         * differed in the last bits from a fresh session's) */
        if (st && (mine || takes))
            kc_kernel_state_drop(ctx);
        if (!takes)
            return KC_OK;
        KC_TRY(kc_pw_build(ctx, &probe, &st));
        *ctx->state = &st->base;
    }
    if (st->by_pixels)
        return kc_pw_run_pixels(ctx, st, handled, act_done);
    kc_claims panels;
    kc_claims_init(&panels, &st->cut, KC_PW_NR / 16);
    /* with a head, the convolution's output is the head's; the output
     * buffer (the Dense's slot) receives the Dense's */
    int no_buffer;
    float *pool_buf = kc_pw_pool_buffer(st, &no_buffer);
    if (no_buffer)
        return kc_fail(KC_ERR_NOMEM, "out of memory for a 1x1 convolution's pooling buffer");
    int failed[KC_BALANCE_MAX_PARTS] = {0};
    kc_pw_io io = {st, ctx->in[0], a->use_bias ? kc_w(ctx, 1) : NULL,
                   st->head ? st->head->conv : pool_buf ? pool_buf : ctx->out[0], NULL, NULL,
                   &panels, failed, 0};
    double seconds[KC_BALANCE_MAX_PARTS] = {0};
    int64_t units[KC_BALANCE_MAX_PARTS];
    if (st->head) {
        io.y = ctx->out[0];
        kc_parallel_two(st->cut.parts, kc_pw_vectors_job, kc_pw_head_total_job, &io, seconds,
                        NULL);
    } else
        kc_parallel_timed(st->cut.parts, kc_pw_vectors_job, &io, seconds);
    KC_TRY(kc_pw_gathered_all(failed, st->cut.parts));
    kc_claims_units(&panels, units);
    if (st->cut.parts > 1)
        kc_balance_update_units(&st->cut, seconds, units);
    if (st->head)
        KC_TRY(kc_pw_head_activate(st->head, ctx->out[0], ctx->keras_major));
    if (pool_buf)
        kc_pw_pool_after(&io, pool_buf, ctx->out[0]);
    *handled = 1;
    *act_done = (pool_buf ? st->out_act : st->act) != 3;
    return KC_OK;
}

kc_balance *kc_pw_balance(kc_kernel_state *state)
{
    return state && state->free == kc_pw_free ? &((kc_pw_state *)state)->cut : NULL;
}

int kc_pw_fetches_residual(const kc_kernel_state *state)
{
    return state && state->free == kc_pw_free && ((const kc_pw_state *)state)->fetch_residual;
}

int kc_pw_claims_outputs(const kc_kernel_state *state)
{
    return state && state->free == kc_pw_free && ((const kc_pw_state *)state)->claim_outputs;
}

int kc_pw_fetch_leads(const kc_kernel_state *state)
{
    return state && state->free == kc_pw_free && ((const kc_pw_state *)state)->prefetch_panels &&
           ((const kc_pw_state *)state)->fetch_lead;
}

int kc_pw_pass_channels(const kc_kernel_state *state)
{
    return state && state->free == kc_pw_free ? (int)((const kc_pw_state *)state)->pass : 0;
}

int kc_pw_fetches_panels(const kc_kernel_state *state)
{
    return state && state->free == kc_pw_free && ((const kc_pw_state *)state)->prefetch_panels;
}

int kc_pw_parts(const kc_kernel_state *state)
{
    if (!state || state->free != kc_pw_free)
        return 0;
    return ((const kc_pw_state *)state)->cut.parts;
}
