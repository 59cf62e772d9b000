#!/usr/bin/env python3
"""Where kerasc's time goes against ONNX Runtime's, stage by stage.

    layer_compare.py MODEL.keras MODEL.onnx [--batch B] [--iters N] [--threads T]
    layer_compare.py --kerasc-summary F --kerasc-stats F --ort-profile F

The first form runs `kerasc summary`, `kerasc bench --stats` and
`tools/bench/peer_ort.js --profile` itself; the second reads their saved
outputs. The two models need not have the same layers (the bench's ONNX
files are torchvision's exports of the Keras architectures: a fused pair on
one side is two nodes on the other, ResNet's strides sit on other layers),
so layers are compared in groups: by kind (conv, dense, pool, other) and by
the height of the layer's output, i.e. by network stage. A layer kerasc
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


def parse_summary(text):
    """{layer name: (class, output height or None)} from `kerasc summary`."""
    layers = {}
    for line in text.splitlines():
        m = re.match(r'^\s(\S+) \((\w+)\)\s+\(([^)]*)\)', line)
        if not m:
            continue
        dims = [d.strip() for d in m.group(3).split(',') if d.strip()]
        height = int(dims[1]) if len(dims) == 4 and dims[1].isdigit() else None
        layers[m.group(1)] = (m.group(2), flat(height))
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
        height = summary.get(name, (cls, None))[1]
        groups[(KERAS_KIND.get(cls, 'other'), height)] += ms
    return groups


def ort_groups(profile, warmup):
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
            meta[name] = (ORT_KIND.get(args.get('op_name', ''), 'other'), height)
    if not times:
        raise ValueError('no node timings in the ONNX Runtime profile')
    groups = collections.Counter()
    for name, ts in times.items():
        kept = ts[warmup:] if len(ts) > warmup else ts
        groups[meta[name]] += statistics.median(kept)
    return groups


def ratio(a, b):
    return '%.2f' % (a / b) if b > 0 else '-'


def table(kc, ort):
    keys = sorted(set(kc) | set(ort),
                  key=lambda k: (KINDS.index(k[0]), -(k[1] if k[1] is not None else -1)))
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
    a = ap.parse_args(argv)
    saved = (a.kerasc_summary, a.kerasc_stats, a.ort_profile)
    try:
        if all(saved):
            summary = open(a.kerasc_summary).read()
            stats = open(a.kerasc_stats).read()
            profile = json.load(open(a.ort_profile))
        elif any(saved) or not (a.keras and a.onnx):
            ap.error('give MODEL.keras MODEL.onnx, or all three of --kerasc-summary, '
                     '--kerasc-stats and --ort-profile')
        else:
            if a.batch < 1 or a.iters < 1:
                ap.error('--batch and --iters must be >= 1')
            common = ['--batch', str(a.batch), '--iters', str(a.iters), '--warmup',
                      str(a.warmup), '--threads', str(a.threads)]
            summary = run([a.kerasc, 'summary', a.keras])
            stats = run([a.kerasc, 'bench', a.keras, '--stats'] + common)
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, 'ort.json')
                run(['node', os.path.join(HERE, 'peer_ort.js'), a.onnx, '--profile', path] + common)
                profile = json.load(open(path))
        print(table(kerasc_groups(parse_summary(summary), parse_stats(stats)),
                    ort_groups(profile, a.warmup)))
    except (OSError, ValueError, RuntimeError) as e:
        print('layer_compare: error: %s' % e, file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
