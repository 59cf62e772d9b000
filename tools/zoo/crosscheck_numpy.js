#!/usr/bin/env node
'use strict';
// Cross-checks the weight-free NumPy-oracle zoo models with tfjs-core
// kernels (a third implementation of the same Keras formulas):
//
//   node tools/zoo/crosscheck_numpy.js
//
// resizing_bilinear / upsampling2d_bilinear: tf.image.resizeBilinear with
// halfPixelCenters=true (TF2's tf.image.resize); center_crop: tf.slice;
// activation_layers_k3 and the Activation outputs of k3_activations:
// tf.elu/softmax/relu6/... Exits 1 on any difference beyond
// 1e-4 * max(1, max|expected|).
const path = require('path');
const npy = require('../oracle/npy');
const {tf} = require('../oracle/run_tfjs');

const ZOO = path.resolve(__dirname, '..', '..', 'tests', 'zoo');
const load = (m, f) => {
  const a = npy.read(path.join(ZOO, m, f));
  return tf.tensor(a.data, a.shape, a.dtype);
};

const hardSigmoid3 = (x) => tf.div(tf.relu6(tf.add(x, 3)), 6);
const CHECKS = {
  resizing_bilinear: () => {
    const x = load('resizing_bilinear', 'input_0.npy');
    const y = load('resizing_bilinear', 'input_1.npy');
    return [tf.image.resizeBilinear(x, [6, 10], false, true), tf.image.resizeBilinear(y, [5, 7], false, true),
      tf.image.resizeBilinear(x, [7, 3], false, true)];
  },
  upsampling2d_bilinear: () => {
    const x = load('upsampling2d_bilinear', 'input_0.npy');
    return [tf.image.resizeBilinear(x, [6, 12], false, true), tf.image.resizeBilinear(x, [6, 8], false, true)];
  },
  center_crop: () => {
    const x = load('center_crop', 'input_0.npy');
    return [tf.slice(x, [0, 1, 2, 0], [-1, 5, 4, -1]), tf.slice(x, [0, 2, 1, 0], [-1, 3, 7, -1])];
  },
  activation_layers_k3: () => {
    const x = load('activation_layers_k3', 'input_0.npy');
    const elu05 = tf.where(tf.greater(x, 0), x, tf.mul(0.5, tf.sub(tf.exp(x), 1)));
    const sm1 = tf.transpose(tf.softmax(tf.transpose(x, [0, 2, 3, 1])), [0, 3, 1, 2]);
    const lrelu = tf.leakyRelu(x, 0.2);
    // ReLU(max_value=4, negative_slope=0.1, threshold=0.5)
    const relu = tf.minimum(tf.where(tf.greaterEqual(x, 0.5), x, tf.mul(0.1, tf.sub(x, 0.5))), 4);
    return [elu05, sm1, lrelu, relu];
  },
  k3_activations: () => {
    const x = load('k3_activations', 'input_0.npy');
    return [null, hardSigmoid3(x), tf.mul(x, hardSigmoid3(x)), tf.mul(x, hardSigmoid3(x)), tf.relu6(x),
      tf.leakyRelu(x, 0.2), tf.mul(x, tf.sigmoid(x)), tf.logSoftmax(x)];
  },
};

async function main() {
  await tf.setBackend('cpu');
  tf.backend().firstUse = false;
  let bad = 0;
  for (const [name, fn] of Object.entries(CHECKS)) {
    const outs = fn();
    const errs = [];
    for (let i = 0; i < outs.length; i++) {
      if (!outs[i]) continue;
      const ref = load(name, `expected_${i}.npy`);
      if (JSON.stringify(ref.shape) !== JSON.stringify(outs[i].shape)) {
        errs.push(`output ${i}: shape ${outs[i].shape} vs ${ref.shape}`);
        bad++;
        continue;
      }
      const err = tf.max(tf.abs(tf.sub(outs[i], ref))).dataSync()[0];
      const tol = 1e-4 * Math.max(1, tf.max(tf.abs(ref)).dataSync()[0]);
      if (!(err <= tol)) bad++;
      errs.push(`${err.toExponential(1)}${err <= tol ? '' : ' MISMATCH'}`);
    }
    console.log(`${name}: tfjs-core ${errs.join(' ')}`);
  }
  process.exit(bad ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
