#!/usr/bin/env node
'use strict';
// TensorFlow.js WebAssembly-backend peer of `kerasc bench` (see bench/README.md).
//
//   node tools/bench/peer_tfjs_wasm.js MODEL [--batch B] [--iters N] [--warmup W] [--threads T]
//
// MODEL: a tfjs layers model: model.json (weight files next to it), a
// directory holding one, or an npm JS-wrapped model (nsfwjs's
// dist/models/*/model.min.js + group1-shard*.min.js). The wrapped files are
// browserify bundles that this tool require()s, i.e. executes, exactly as
// nsfwjs does (and tools/oracle/run_tfjs.js): use it on packages you trust.
//
// Backend: @tensorflow/tfjs-backend-wasm (XNNPACK, SIMD build), from
// bench/node_modules with the same tfjs version as tools/. Threads: tfjs-wasm
// 4.x reports no multithread support under Node (the flag
// WASM_HAS_MULTITHREAD_SUPPORT is false when IS_NODE, tfjs issue #3830: its
// pthread workers are browser Blob workers), so it runs on ONE thread whatever
// --threads says; setThreadsCount(T) is still called, and the line
// `threads_used: N` reports what the backend actually uses. --force-threads
// sets the flag anyway (fails under Node 20 at the time of writing).
//
// Same protocol and output lines as `kerasc bench`: load_ms = reading the
// files + tf.loadLayersModel (backend initialisation before it, not counted);
// W warm-up runs (first timed as first_run_ms); N timed runs of
// model.predict + dataSync on a seeded uniform [0, 1) NHWC input of batch B;
// the median; peak RSS (ru_maxrss, node itself included).
const fs = require('fs');
const path = require('path');

const NM = path.resolve(__dirname, '..', '..', 'bench', 'node_modules');
const tf = require(path.join(NM, '@tensorflow', 'tfjs'));
const wasm = require(path.join(NM, '@tensorflow', 'tfjs-backend-wasm'));

function parseArgs(argv) {
  const a = {model: null, batch: 1, iters: 20, warmup: 3, threads: 0, forceThreads: false};
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
    else if (k === '--force-threads') a.forceThreads = true;
    else if (k.startsWith('-') || a.model) throw new Error(`unexpected argument '${k}'`);
    else a.model = k;
  }
  if (!a.model) throw new Error('usage: peer_tfjs_wasm.js MODEL [--batch B] [--iters N] [--warmup W] [--threads T]');
  if (a.batch < 1 || a.iters < 1) throw new Error('--batch and --iters must be >= 1');
  return a;
}

// --- model files (as tools/oracle/run_tfjs.js reads them) ---
function resolveModelFile(p) {
  if (fs.statSync(p).isDirectory()) {
    for (const name of ['model.json', 'model.min.js', 'model.js']) {
      if (fs.existsSync(path.join(p, name))) return path.join(p, name);
    }
    throw new Error(`${p}: no model.json / model.min.js in directory`);
  }
  return p;
}

function loadWrapped(file) {
  for (const suffix of ['', '.min.js', '.js']) {
    const f = path.resolve(file + suffix);
    if (fs.existsSync(f) && fs.statSync(f).isFile()) return require(f);
  }
  throw new Error(`cannot find ${file}(.min.js|.js)`);
}

function readArtifacts(modelPath) {
  const file = resolveModelFile(modelPath);
  const dir = path.dirname(file);
  const wrapped = /\.js$/.test(file);
  const json = wrapped ? loadWrapped(file) : JSON.parse(fs.readFileSync(file, 'utf8'));
  if (json.format && json.format !== 'layers-model') throw new Error(`${file}: format ${json.format} is not a layers model`);
  if (!json.modelTopology) throw new Error(`${file}: no modelTopology`);
  const weightSpecs = [];
  const parts = [];
  for (const group of json.weightsManifest || []) {
    for (const p of group.paths) {
      if (!wrapped) {
        parts.push(fs.readFileSync(path.join(dir, p)));
      } else {
        const val = loadWrapped(path.join(dir, p.replace(/\.bin$/, '')));
        if (typeof val !== 'string') throw new Error(`${p}: expected a base64 string export`);
        parts.push(Buffer.from(val, 'base64'));
      }
    }
    weightSpecs.push(...group.weights);
  }
  const all = Buffer.concat(parts);
  return {
    modelTopology: json.modelTopology,
    weightSpecs,
    weightData: all.buffer.slice(all.byteOffset, all.byteOffset + all.length),
    format: json.format,
    generatedBy: json.generatedBy,
    convertedBy: json.convertedBy,
  };
}

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

async function main() {
  const a = parseArgs(process.argv.slice(2));
  if (a.forceThreads) tf.env().set('WASM_HAS_MULTITHREAD_SUPPORT', true);
  if (a.threads) wasm.setThreadsCount(a.threads);
  await tf.setBackend('wasm');
  await tf.ready();
  if (tf.getBackend() !== 'wasm') throw new Error('could not select the tfjs wasm backend');
  const simd = await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT');
  const mt = await tf.env().getAsync('WASM_HAS_MULTITHREAD_SUPPORT');
  let threadsUsed = 1;
  try { threadsUsed = mt ? wasm.getThreadsCount() : 1; } catch (e) { threadsUsed = 1; }

  const t0 = now();
  const model = await tf.loadLayersModel({load: async () => readArtifacts(a.model)}, {strict: true});
  const loadMs = now() - t0;

  const xs = model.inputs.map((inp, idx) => {
    const dims = inp.shape.map((d, j) => (j === 0 ? a.batch : (d == null || d < 0 ? 16 : d)));
    const n = dims.reduce((p, d) => p * d, 1);
    return tf.tensor(seededUniform(n, 0x9e3779b9 + idx), dims, 'float32');
  });
  const times = [];
  let firstMs = 0;
  for (let it = 0; it < a.warmup + a.iters; it++) {
    const s = now();
    let ys = model.predict(xs.length === 1 ? xs[0] : xs, {batchSize: a.batch});
    if (!Array.isArray(ys)) ys = [ys];
    for (const y of ys) y.dataSync();
    const dt = now() - s;
    ys.forEach((y) => y.dispose());
    if (it === 0) firstMs = dt;
    if (it >= a.warmup) times.push(dt);
  }
  times.sort((x, y) => x - y);
  const n = times.length;
  const median = n % 2 ? times[(n - 1) / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  const lines = [
    `model: ${a.model}`,
    `runtime: tfjs-backend-wasm ${wasm.version_wasm || require(path.join(NM, '@tensorflow', 'tfjs-backend-wasm', 'package.json')).version}` +
      ` (simd ${simd ? 'yes' : 'no'}, multithread ${mt ? 'yes' : 'no'})`,
    `batch: ${a.batch}`,
    `iters: ${a.iters}`,
    `threads: ${a.threads || 'all'}`,
    `threads_used: ${threadsUsed}`,
    `load_ms: ${loadMs.toFixed(1)}`,
    `first_run_ms: ${firstMs.toFixed(2)}`,
    `median_ms: ${median.toFixed(3)}`,
    `median_ms_per_image: ${(median / a.batch).toFixed(3)}`,
    `min_ms: ${times[0].toFixed(3)}`,
    `max_ms: ${times[n - 1].toFixed(3)}`,
    `peak_rss_kb: ${process.resourceUsage().maxRSS}`,
  ];
  process.stdout.write(lines.join('\n') + '\n');
  xs.forEach((x) => x.dispose());
  model.dispose();
}

main().catch((err) => {
  process.stderr.write(`peer_tfjs_wasm: error: ${err && err.message ? err.message : err}\n`);
  process.exit(1);
});
