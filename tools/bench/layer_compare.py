#!/usr/bin/env python3
"""Where kerasc's time goes against ONNX Runtime's, stage by stage.

    layer_compare.py MODEL.keras MODEL.onnx [--batch B] [--iters N] [--threads T]
                     [--rounds N] [--by-kernel]
    layer_compare.py --kerasc-summary F --kerasc-stats F --ort-profile F [--by-kernel]

The first form runs `kerasc summary`, `kerasc bench --stats` and
`tools/bench/peer_ort.js --profile` itself; the second reads their saved
outputs. The two models need not have the same layers (the bench's ONNX
files are torchvision's exports of the Keras architectures: a fused pair on
one side is two nodes on the other, ResNet's strides sit on other layers),
so layers are compared in groups: by kind (conv, dense, pool, other) and by
the height of the layer's output, i.e. by network stage. With --by-kernel
the convolutions split further by their kernel's taps ("conv 1x1", "conv
3x3", "conv 7 taps" for a 1x7 or 7x1, "dwconv 3x3" for a depthwise one),
read from the weights' shapes in ONNX Runtime's profile and from each
layer's parameter count and input channels in `kerasc summary`: at batch 1
on ResNet50 this told that kerasc's 1x1 layers ran level with ONNX
Runtime's or behind them (1.00-1.17 of their time) and its 3x3 ones
(Winograd) in 0.45-0.72. --rounds N
runs the two profiles N times in turns and averages each group over them,
as the machine's speed moves by 15% and more within minutes. A layer kerasc
runs inside another (a depthwise convolution fused into the 1x1 before it,
an activation, a folded BatchNormalization) shows no time of its own: its
time is in the host layer's group, at the host's output height. A group where
kerasc spends more than ONNX Runtime is where kerasc loses.

Times: kerasc's are its profile's means over the timed runs (at a batch
that runs in lanes, lane 0's: its images on one thread beside the other
lane's, so that its layers add up to a run as ONNX Runtime's nodes do);
ONNX Runtime's are the medians of each node's kernel time over its runs
after the warm-ups. Both profiles cost some time of their own (ONNX Runtime's more),
so the totals read a little above the plain `median_ms` of either runner:
compare groups with each other, and the totals with `make bench`.
"""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

KERAS_KIND = {
    'Conv1D': 'conv', 'Conv2D': 'conv', 'Conv3D': 'conv', 'DepthwiseConv2D': 'conv',
    'SeparableConv2D': 'conv', 'Conv2DTranspose': 'conv', 'Dense': 'dense',
    'MaxPooling2D': 'pool', 'AveragePooling2D': 'pool', 'GlobalAveragePooling2D': 'pool',
    'GlobalMaxPooling2D': 'pool',
}
ORT_KIND = {
    'Conv': 'conv', 'FusedConv': 'conv', 'NchwcConv': 'conv', 'ConvTranspose': 'conv',
    'Gemm': 'dense', 'FusedGemm': 'dense', 'MatMul': 'dense', 'FusedMatMul': 'dense',
    'MaxPool': 'pool', 'AveragePool': 'pool', 'GlobalAveragePool': 'pool',
    'GlobalMaxPool': 'pool',
}
KINDS = ('conv', 'dense', 'pool', 'other')


def flat(height):
    """A 1-pixel-high output (a global pooling in NCHW) counts as flat, as
    Keras's (batch, channels) does."""
    return None if height == 1 or not isinstance(height, int) else height


def square_side(n):
    """n's square root where n is a perfect square, else None."""
    side = int(round(n ** 0.5))
    return side if side * side == n else None


def taps_label(kind, taps):
    """'conv 3x3' for 9 taps, 'conv 7 taps' for 7, the kind alone if unknown."""
    if not taps:
        return kind
    side = square_side(taps)
    return '%s %s' % (kind, '%dx%d' % (side, side) if side else '%d taps' % taps)


def summary_taps(cls, params, c_in, c_out):
    """A convolution's taps from its parameter count, with a bias or
    without (Conv: taps x c_in x c_out; depthwise: taps x c_out, c_out =
    c_in x multiplier); None where neither divides. A depthwise count
    divides both ways (taps + 1 with a bias): the square one is taken."""
    per = {'Conv1D': c_in * c_out, 'Conv2D': c_in * c_out, 'DepthwiseConv2D': c_out}.get(cls)
    if not per:
        return None
    fits = [w // per for w in (params - c_out, params) if w > 0 and w % per == 0]
    squares = [t for t in fits if square_side(t)]
    return (squares or fits or [None])[0]


def parse_summary(text, by_kernel=False):
    """{layer name: (group kind, output height or None)} from `kerasc
    summary`; with by_kernel, convolutions' kinds name their taps (a
    layer's input channels: those of the layer its "Connected to" names,
    or in a Sequential, of the layer above, the first one the model's
    input)."""
    rows, shapes = [], {}
    for line in text.splitlines():
        m = re.match(r'^Input \d+: (\S+) \(([^)]*)\)', line)
        if m:
            shapes.setdefault('', m.group(2))
            continue
        m = re.match(r'^\s(\S+) \((\w+)\)\s+\(([^)]*)\)\s+([0-9,]+)\s*(.*)$', line)
        if m:
            rows.append(m.groups())
            shapes[m.group(1)] = m.group(3)
    layers, before = {}, ''
    for name, cls, shape, params, connected in rows:
        dims = [d.strip() for d in shape.split(',') if d.strip()]
        height = int(dims[1]) if len(dims) == 4 and dims[1].isdigit() else None
        kind = KERAS_KIND.get(cls, 'other')
        if by_kernel and cls in ('Conv1D', 'Conv2D', 'DepthwiseConv2D'):
            src = re.match(r'\[?(\S+?)\[', connected.strip())
            c_in = shapes.get(src.group(1) if src else before, '').split(',')[-1].strip()
            c_out = dims[-1] if dims else ''
            taps = (summary_taps(cls, int(params.replace(',', '')), int(c_in), int(c_out))
                    if c_in.isdigit() and c_out.isdigit() else None)
            kind = taps_label('dwconv' if cls == 'DepthwiseConv2D' else 'conv', taps)
        layers[name] = (kind, flat(height))
        before = name
    return layers


def parse_stats(text):
    """[(layer, class, ms)] from the profile `kerasc bench --stats` prints."""
    rows, inside = [], False
    for line in text.splitlines():
        if line.startswith('profile:'):
            inside = True
            continue
        if line.startswith('by class:'):
            break
        # name, class, ms, % and (since 12-07) idle ms
        m = re.match(r'^  (\S+)\s+(\w+)\s+([0-9.]+)\s+([0-9.]+)(?:\s+[0-9.]+)?$', line)
        if inside and m:
            rows.append((m.group(1), m.group(2), float(m.group(3))))
    if not rows:
        raise ValueError('no per-layer profile in the kerasc output (was it run with --stats?)')
    return rows


def kerasc_groups(summary, stats):
    groups = collections.Counter()
    for name, cls, ms in stats:
        kind, height = summary.get(name, (KERAS_KIND.get(cls, 'other'), None))
        groups[(kind, height)] += ms
    return groups


def ort_kind(args, by_kernel):
    """A node's group kind; with by_kernel a Conv's names its taps, from
    its weights' shape (F, C / groups, kh[, kw]): depthwise where each
    output reads one channel of an input of several."""
    kind = ORT_KIND.get(args.get('op_name', ''), 'other')
    shapes = args.get('input_type_shape')
    if not by_kernel or kind != 'conv' or not isinstance(shapes, list) or len(shapes) < 2:
        return kind
    x, w = [next(iter(s.values()), None) if isinstance(s, dict) and s else None
            for s in shapes[:2]]
    if not (isinstance(w, list) and len(w) >= 3 and all(isinstance(d, int) for d in w)):
        return kind
    taps = 1
    for d in w[2:]:
        taps *= d
    depthwise = w[1] == 1 and isinstance(x, list) and len(x) > 1 and x[1] != 1
    return taps_label('dwconv' if depthwise else 'conv', taps)


def ort_groups(profile, warmup, by_kernel=False):
    """Per (kind, height): the sum over nodes of each node's median kernel
    time (ms) over its runs after the first `warmup`."""
    if not isinstance(profile, list):
        raise ValueError('the ONNX Runtime profile is not a list of trace events')
    times, meta = collections.defaultdict(list), {}
    for ev in profile:
        if not isinstance(ev, dict) or ev.get('cat') != 'Node':
            continue
        name = ev.get('name', '')
        if not isinstance(name, str) or not name.endswith('_kernel_time'):
            continue
        args = ev.get('args') if isinstance(ev.get('args'), dict) else {}
        dur = ev.get('dur', 0)
        if not isinstance(dur, (int, float)):
            raise ValueError('node %s has a duration that is not a number' % name)
        times[name].append(dur / 1000.0)
        if name not in meta:
            shape = args.get('output_type_shape')
            first = shape[0] if isinstance(shape, list) and shape else None
            dims = next(iter(first.values()), []) if isinstance(first, dict) and first else []
            height = flat(dims[2]) if isinstance(dims, list) and len(dims) == 4 else None
            meta[name] = (ort_kind(args, by_kernel), height)
    if not times:
        raise ValueError('no node timings in the ONNX Runtime profile')
    groups = collections.Counter()
    for name, ts in times.items():
        kept = ts[warmup:] if len(ts) > warmup else ts
        groups[meta[name]] += statistics.median(kept)
    return groups


def ratio(a, b):
    return '%.2f' % (a / b) if b > 0 else '-'


def kind_order(kind):
    """conv, conv 1x1, conv 3x3, ..., dwconv ..., dense, pool, other."""
    base = kind.split(' ')[0]
    rank = KINDS.index(base) if base in KINDS else KINDS.index('conv')
    taps = re.search(r'(\d+)(?:x\d+| taps)', kind)
    return (rank, base, int(taps.group(1)) if taps else 0, kind)


def averaged(groups):
    """Each key's mean over the rounds (a key missing from a round counts 0)."""
    total = collections.Counter()
    for g in groups:
        total.update(g)
    return {k: v / len(groups) for k, v in total.items()}


def table(kc, ort):
    keys = sorted(set(kc) | set(ort),
                  key=lambda k: (kind_order(k[0]), -(k[1] if k[1] is not None else -1)))
    out = ['| kind | output height | kerasc ms | ORT ms | kerasc/ORT | kerasc - ORT ms |',
           '|---|---:|---:|---:|---:|---:|']
    for key in keys:
        a, b = kc.get(key, 0.0), ort.get(key, 0.0)
        out.append('| %s | %s | %.3f | %.3f | %s | %+.3f |' %
                   (key[0], key[1] if key[1] is not None else '-', a, b, ratio(a, b), a - b))
    ta, tb = sum(kc.values()), sum(ort.values())
    out.append('| **all** | | %.3f | %.3f | %s | %+.3f |' % (ta, tb, ratio(ta, tb), ta - tb))
    return '\n'.join(out)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise RuntimeError('%s failed (exit %d): %s' % (' '.join(cmd), p.returncode,
                                                        p.stdout.strip()[-400:]))
    return p.stdout


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('keras', nargs='?')
    ap.add_argument('onnx', nargs='?')
    ap.add_argument('--batch', type=int, default=1)
    ap.add_argument('--iters', type=int, default=20)
    ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--kerasc', default=os.path.join(ROOT, 'build', 'kerasc'))
    ap.add_argument('--kerasc-summary')
    ap.add_argument('--kerasc-stats')
    ap.add_argument('--ort-profile')
    ap.add_argument('--rounds', type=int, default=1)
    ap.add_argument('--by-kernel', action='store_true')
    a = ap.parse_args(argv)
    saved = (a.kerasc_summary, a.kerasc_stats, a.ort_profile)
    try:
        if all(saved):
            if a.rounds != 1:
                ap.error('--rounds runs the profiles: not with saved outputs')
            layers = parse_summary(open(a.kerasc_summary).read(), a.by_kernel)
            kc = kerasc_groups(layers, parse_stats(open(a.kerasc_stats).read()))
            ort = ort_groups(json.load(open(a.ort_profile)), a.warmup, a.by_kernel)
        elif any(saved) or not (a.keras and a.onnx):
            ap.error('give MODEL.keras MODEL.onnx, or all three of --kerasc-summary, '
                     '--kerasc-stats and --ort-profile')
        else:
            if a.batch < 1 or a.iters < 1 or a.rounds < 1:
                ap.error('--batch, --iters and --rounds must be >= 1')
            common = ['--batch', str(a.batch), '--iters', str(a.iters), '--warmup',
                      str(a.warmup), '--threads', str(a.threads)]
            layers = parse_summary(run([a.kerasc, 'summary', a.keras]), a.by_kernel)
            kcs, orts = [], []
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, 'ort.json')
                for _ in range(a.rounds):  # in turns: both see the machine's same minutes
                    stats = run([a.kerasc, 'bench', a.keras, '--stats'] + common)
                    kcs.append(kerasc_groups(layers, parse_stats(stats)))
                    run(['node', os.path.join(HERE, 'peer_ort.js'), a.onnx, '--profile', path] +
                        common)
                    orts.append(ort_groups(json.load(open(path)), a.warmup, a.by_kernel))
            kc, ort = averaged(kcs), averaged(orts)
        print(table(kc, ort))
    except (OSError, ValueError, RuntimeError) as e:
        print('layer_compare: error: %s' % e, file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
