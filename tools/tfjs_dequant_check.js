#!/usr/bin/env node
// Reference values for kerasc's tfjs loader, computed by TensorFlow.js itself.
//
//   node tools/tfjs_dequant_check.js <model dir> <weight name> [count]
//
// Prints the first `count` values (default 8) of one weight as decoded and
// dequantized by tf.io.decodeWeights, with 9 significant digits (enough to
// pin a float32 exactly). tests/unit/test_tfjs.c holds values printed by
// this script, so a change in kerasc's dequantization shows up as a test
// failure without node at test time.
//
// Unlike kerasc, this dev tool require()s the JS-wrapped model files, i.e.
// runs them: use it only on packages you already trust (nsfwjs from npm).
'use strict';
const path = require('path');
const tf = require('@tensorflow/tfjs-core');
require('@tensorflow/tfjs-backend-cpu'); // decodeWeights makes tensors: needs a backend

function loadWrapped(file) {
  // nsfwjs ships model.min.js / group1-shardNofM.min.js browserify bundles.
  for (const suffix of ['', '.min.js', '.js']) {
    try {
      return require(path.resolve(file + suffix));
    } catch (err) {
      if (err.code !== 'MODULE_NOT_FOUND') throw err;
    }
  }
  throw new Error(`cannot find ${file}`);
}

async function main() {
  const [dir, name, countArg] = process.argv.slice(2);
  if (!dir || !name) {
    console.error('usage: tfjs_dequant_check.js <model dir> <weight name> [count]');
    process.exit(2);
  }
  const count = Number(countArg || 8);
  const model = loadWrapped(path.join(dir, 'model'));
  for (const group of model.weightsManifest) {
    if (!group.weights.some((w) => w.name === name)) continue;
    const parts = group.paths.map((p) => Buffer.from(loadWrapped(path.join(dir, p)), 'base64'));
    const bytes = Buffer.concat(parts);
    const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);
    const tensors = tf.io.decodeWeights(buffer, group.weights);
    const t = tensors[name];
    const values = Array.from(t.dataSync().slice(0, count)).map((v) => Number(v.toPrecision(9)));
    console.log(JSON.stringify({ name, shape: t.shape, dtype: t.dtype, values }));
    return;
  }
  console.error(`no weight named ${name}`);
  process.exit(1);
}

main().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
