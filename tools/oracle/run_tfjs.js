#!/usr/bin/env node
'use strict';
// Independent numerical oracle: runs a TensorFlow.js layers model with the
// pure-JS "cpu" backend of @tensorflow/tfjs.
//
//   node tools/oracle/run_tfjs.js MODEL_JSON_OR_DIR --input a.npy [--input b.npy] \
//        --output out0.npy [--output out1.npy ...] [--summary]
//
// MODEL_JSON_OR_DIR is a model.json (weight shards next to it, as named in
// its weightsManifest), a directory holding model.json, or a JS-wrapped
// model as shipped by npm nsfwjs (model.min.js next to
// group1-shardNofM.min.js, or their directory). The JS-wrapped files are
// browserify bundles; this tool require()s them, i.e. executes them, exactly
// as nsfwjs itself does: use it only on packages you trust (test tooling).
//
// Inputs are bound to model.inputs in order; int32 .npy files become int32
// tensors. Outputs are written in model.outputs order as float32 (or int32)
// .npy files. With fewer --output paths than outputs, the extra outputs are
// not written; --summary prints layer count and output shapes to stderr.
const fs = require('fs');
const path = require('path');
const npy = require('./npy');

const tf = require('@tensorflow/tfjs');

function resolveModelFile(p) {
  const st = fs.statSync(p);
  if (st.isDirectory()) {
    for (const name of ['model.json', 'model.min.js', 'model.js']) {
      if (fs.existsSync(path.join(p, name))) return path.join(p, name);
    }
    throw new Error(`${p}: no model.json / model.min.js in directory`);
  }
  return p;
}

function isJsWrapped(file) {
  return /\.js$/.test(file);
}

function loadWrappedModule(file) {
  // nsfwjs's own loader does require() on these bundles.
  for (const suffix of ['', '.min.js', '.js']) {
    const f = path.resolve(file + suffix);
    if (fs.existsSync(f) && fs.statSync(f).isFile()) return require(f);
  }
  throw new Error(`cannot find ${file}(.min.js|.js)`);
}

function readShard(dir, p, wrapped) {
  if (!wrapped) return fs.readFileSync(path.join(dir, p));
  // Shard files of a JS-wrapped model export a base64 string.
  const val = loadWrappedModule(path.join(dir, p.replace(/\.bin$/, '')));
  if (typeof val !== 'string') throw new Error(`${p}: expected a base64 string export`);
  return Buffer.from(val, 'base64');
}

// Reads the model artifacts (topology, weight specs, concatenated weight
// bytes) from disk. Returns a tf.io.ModelArtifacts.
function readArtifacts(modelPath) {
  const file = resolveModelFile(modelPath);
  const dir = path.dirname(file);
  const wrapped = isJsWrapped(file);
  const json = wrapped ? loadWrappedModule(file) : JSON.parse(fs.readFileSync(file, 'utf8'));
  if (json.format && json.format !== 'layers-model') {
    throw new Error(`${file}: format ${json.format} is not a layers model`);
  }
  if (!json.modelTopology) throw new Error(`${file}: no modelTopology`);
  const weightSpecs = [];
  const parts = [];
  for (const group of json.weightsManifest || []) {
    for (const p of group.paths) parts.push(readShard(dir, p, wrapped));
    weightSpecs.push(...group.weights);
  }
  const all = Buffer.concat(parts);
  const weightData = all.buffer.slice(all.byteOffset, all.byteOffset + all.length);
  return {
    modelTopology: json.modelTopology,
    weightSpecs,
    weightData,
    format: json.format,
    generatedBy: json.generatedBy,
    convertedBy: json.convertedBy,
  };
}

function fileHandler(modelPath) {
  return {load: async () => readArtifacts(modelPath)};
}

async function loadModel(modelPath) {
  await tf.setBackend('cpu');
  await tf.ready();
  if (tf.getBackend() !== 'cpu') throw new Error('could not select the tfjs cpu backend');
  tf.backend().firstUse = false; // no "install tfjs-node" banner on stderr
  return tf.loadLayersModel(fileHandler(modelPath), {strict: true});
}

function toTensor(arr) {
  return tf.tensor(arr.data, arr.shape, arr.dtype === 'int32' ? 'int32' : 'float32');
}

async function predict(model, inputArrays) {
  if (inputArrays.length !== model.inputs.length) {
    throw new Error(`model has ${model.inputs.length} inputs, got ${inputArrays.length}`);
  }
  const xs = inputArrays.map(toTensor);
  let ys = model.predict(xs.length === 1 ? xs[0] : xs, {batchSize: 1 << 30});
  if (!Array.isArray(ys)) ys = [ys];
  const out = [];
  for (const y of ys) {
    const dtype = y.dtype === 'int32' ? 'int32' : 'float32';
    const data = await y.data();
    out.push({dtype, shape: y.shape.slice(), data: dtype === 'int32' ? Int32Array.from(data) : Float32Array.from(data)});
    y.dispose();
  }
  xs.forEach((x) => x.dispose());
  return out;
}

function parseArgs(argv) {
  const args = {model: null, inputs: [], outputs: [], summary: false};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--input') args.inputs.push(argv[++i]);
    else if (a === '--output') args.outputs.push(argv[++i]);
    else if (a === '--summary') args.summary = true;
    else if (a.startsWith('--')) throw new Error(`unknown option ${a}`);
    else if (args.model === null) args.model = a;
    else throw new Error(`unexpected argument ${a}`);
  }
  if (!args.model || args.inputs.length === 0) {
    throw new Error('usage: run_tfjs.js MODEL_JSON_OR_DIR --input a.npy [--input b.npy] --output out0.npy [--output ...] [--summary]');
  }
  return args;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const model = await loadModel(args.model);
  const inputs = args.inputs.map((f) => npy.read(f));
  const outs = await predict(model, inputs);
  if (args.summary) {
    process.stderr.write(`${model.name}: ${model.layers.length} layers, inputs ${JSON.stringify(model.inputs.map((t) => t.shape))}, outputs ${JSON.stringify(outs.map((o) => o.shape))}\n`);
  }
  if (args.outputs.length > outs.length) {
    throw new Error(`model has ${outs.length} outputs, ${args.outputs.length} --output given`);
  }
  args.outputs.forEach((f, i) => npy.write(f, outs[i]));
}

module.exports = {readArtifacts, loadModel, predict, tf};

if (require.main === module) {
  main().catch((err) => {
    process.stderr.write(`run_tfjs: error: ${err && err.message ? err.message : err}\n`);
    process.exit(1);
  });
}
