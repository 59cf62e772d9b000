#!/usr/bin/env node
'use strict';
// ONNX Runtime peer of `kerasc bench` (see bench/README.md).
//
//   node tools/bench/peer_ort.js MODEL.onnx [--batch B] [--iters N] [--warmup W] [--threads T]
//                                [--slices S] [--profile FILE]
//
// Same protocol and output as `kerasc bench`: load (file read + session
// creation with graph optimisations "all") timed as load_ms; W warm-up runs,
// the first one timed as first_run_ms; N timed runs on a seeded uniform [0, 1)
// input of the model's shape (NCHW here, batch B); the median; peak RSS of
// the process (ru_maxrss: node itself, ~40-50 MB, included). Threads:
// intraOpNumThreads = T, interOpNumThreads = 1, sequential execution.
// --slices S: `kerasc bench --slices`'s protocol, for tools/bench/bench.py to
// alternate the two runners slice by slice: `ready` after the warm-up, then
// S slices of N timed runs, each started by a line on standard input and
// followed by `slice_median_ms: X`; the report covers all S x N runs.
// --profile FILE: ONNX Runtime's own per-node profile (JSON, chrome trace
// format) of every run, warm-ups included, written to FILE; profiling adds
// its own overhead, so its times are for per-layer comparison
// (tools/bench/layer_compare.py), not for the ms/image figures.
// onnxruntime-node comes from bench/node_modules (tools/bench/install_peers.sh).
const fs = require('fs');
const path = require('path');

const BENCH = path.resolve(__dirname, '..', '..', 'bench');
const ort = require(path.join(BENCH, 'node_modules', 'onnxruntime-node'));
const ortVersion = require(path.join(BENCH, 'node_modules', 'onnxruntime-node', 'package.json')).version;

function parseArgs(argv) {
  const a = {model: null, batch: 1, iters: 20, warmup: 3, threads: 0, slices: 0, profile: null};
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const num = () => {
      const v = Number(argv[++i]);
      if (!Number.isInteger(v) || v < 0) throw new Error(`${k} takes a non-negative integer`);
      return v;
    };
    if (k === '--batch') a.batch = num();
    else if (k === '--iters') a.iters = num();
    else if (k === '--warmup') a.warmup = num();
    else if (k === '--threads') a.threads = num();
    else if (k === '--slices') a.slices = num();
    else if (k === '--profile') {
      if (i + 1 >= argv.length) throw new Error('--profile takes a file name');
      a.profile = argv[++i];
    }
    else if (k.startsWith('-') || a.model) throw new Error(`unexpected argument '${k}'`);
    else a.model = k;
  }
  if (!a.model) throw new Error('usage: peer_ort.js MODEL.onnx [--batch B] [--iters N] [--warmup W] [--threads T]');
  if (a.batch < 1 || a.iters < 1) throw new Error('--batch and --iters must be >= 1');
  return a;
}

// xorshift32, seeded: uniform [0, 1) floats (values need not equal kerasc's;
// the arithmetic does not depend on them).
function seededUniform(n, seed) {
  const out = new Float32Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    out[i] = (x >>> 8) / 16777216;
  }
  return out;
}

const now = () => Number(process.hrtime.bigint()) / 1e6;

function medianOfSorted(v) {
  const n = v.length;
  return n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

function medianOf(xs) {
  return medianOfSorted(xs.slice().sort((x, y) => x - y));
}

// Standard input's lines, one per next() (the harness's go-aheads).
function stdinLines() {
  const rl = require('readline').createInterface({input: process.stdin, terminal: false});
  return rl[Symbol.asyncIterator]();
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const opts = {
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    interOpNumThreads: 1,
    executionProviders: ['cpu'],
  };
  if (a.threads) opts.intraOpNumThreads = a.threads;
  // ORT names its profile PREFIX_<date>.json: made beside FILE, renamed after.
  const profileDir = a.profile ? path.dirname(path.resolve(a.profile)) : null;
  const profilePrefix = `.ort_profile_${process.pid}`;
  if (a.profile) {
    opts.enableProfiling = true;
    opts.profileFilePrefix = path.join(profileDir, profilePrefix);
  }
  const t0 = now();
  const session = await ort.InferenceSession.create(a.model, opts);
  const loadMs = now() - t0;
  const feeds = {};
  session.inputNames.forEach((name, idx) => {
    const meta = session.inputMetadata ? session.inputMetadata[idx] : null;
    let dims = meta && meta.shape ? meta.shape.slice() : null;
    if (!dims) throw new Error(`${a.model}: input ${name} has no shape metadata`);
    dims = dims.map((d, j) => (j === 0 ? a.batch : (typeof d === 'number' && d > 0 ? d : 16)));
    const n = dims.reduce((p, d) => p * d, 1);
    feeds[name] = new ort.Tensor('float32', seededUniform(n, 0x9e3779b9 + idx), dims);
  });
  const times = [];
  let firstMs = 0;
  const timed = a.iters * (a.slices || 1);
  const lines_in = a.slices ? stdinLines() : null;
  for (let it = 0; it < a.warmup + timed; it++) {
    if (a.slices && it >= a.warmup && (it - a.warmup) % a.iters === 0) {
      if (it === a.warmup) process.stdout.write('ready\n');
      const got = await lines_in.next();
      if (got.done) {
        throw new Error(`standard input ended after ${(it - a.warmup) / a.iters} of ${a.slices} slices`);
      }
    }
    const s = now();
    const out = await session.run(feeds);
    const dt = now() - s;
    for (const k of Object.keys(out)) if (out[k].dispose) out[k].dispose();
    if (it === 0) firstMs = dt;
    if (it >= a.warmup) times.push(dt);
    if (a.slices && it >= a.warmup && (it - a.warmup + 1) % a.iters === 0) {
      process.stdout.write(`slice_median_ms: ${medianOf(times.slice(-a.iters)).toFixed(3)}\n`);
    }
  }
  if (lines_in) lines_in.return();
  times.sort((x, y) => x - y); // once: the median and the extremes below
  const n = times.length;
  const median = medianOfSorted(times);
  const lines = [
    `model: ${a.model}`,
    `runtime: onnxruntime-node ${ortVersion}`,
    `batch: ${a.batch}`,
    `iters: ${timed}`,
    `threads: ${a.threads || 'all'}`,
    `load_ms: ${loadMs.toFixed(1)}`,
    `first_run_ms: ${firstMs.toFixed(2)}`,
    `median_ms: ${median.toFixed(3)}`,
    `median_ms_per_image: ${(median / a.batch).toFixed(3)}`,
    `min_ms: ${times[0].toFixed(3)}`,
    `max_ms: ${times[n - 1].toFixed(3)}`,
    `peak_rss_kb: ${process.resourceUsage().maxRSS}`,
  ];
  if (a.profile) {
    session.endProfiling();
    const made = fs.readdirSync(profileDir).filter((f) => f.startsWith(profilePrefix));
    if (made.length !== 1) throw new Error(`ONNX Runtime wrote no profile under ${profileDir}`);
    fs.renameSync(path.join(profileDir, made[0]), a.profile);
    lines.push(`profile: ${a.profile}`);
  }
  process.stdout.write(lines.join('\n') + '\n');
  if (session.release) await session.release();
}

main().catch((err) => {
  process.stderr.write(`peer_ort: error: ${err && err.message ? err.message : err}\n`);
  process.exit(1);
});
