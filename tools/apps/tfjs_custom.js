#!/usr/bin/env node
'use strict';
// tools/oracle/run_tfjs.js plus the few classes keras.applications models
// need and tfjs-layers 4.22 lacks, for the tfjs cross-check of the
// NumPy-oracle models (tools/apps/tfjs_crosscheck.py):
//
//   LayerScale   keras.applications.convnext.LayerScale: x * gamma
//   Normalization  (x - mean) / max(sqrt(variance), 1e-7), mean/variance from
//                the config or from the mean/variance/count weights
//   ConstOp      a tf.keras 2 TFOpLambda raw-op node with a constant y, the
//                constant moved into the config (tfjs predict() does not pass
//                a node's call kwargs): op 'add' (x + y), 'mul' (x * y)
//
//   node tools/apps/tfjs_custom.js MODEL_JSON --input a.npy --output y.npy
const oracle = require('../oracle/run_tfjs');
const npy = require('../oracle/npy');

const tf = oracle.tf;

function first(inputs) {
  return Array.isArray(inputs) ? inputs[0] : inputs;
}

class LayerScale extends tf.layers.Layer {
  constructor(cfg) {
    super(cfg);
    this.projectionDim = cfg.projectionDim;
    this.initValues = cfg.initValues;
  }
  build(inputShape) {
    this.gamma = this.addWeight('gamma', [this.projectionDim], 'float32', tf.initializers.ones());
    this.built = true;
  }
  computeOutputShape(s) {
    return s;
  }
  call(inputs) {
    return tf.tidy(() => tf.mul(first(inputs), this.gamma.read()));
  }
  getConfig() {
    return Object.assign(super.getConfig(), {projectionDim: this.projectionDim, initValues: this.initValues});
  }
  static get className() {
    return 'LayerScale';
  }
}

class Normalization extends tf.layers.Layer {
  constructor(cfg) {
    super(cfg);
    this.axis = cfg.axis;
    this.meanC = cfg.mean;
    this.varC = cfg.variance;
    this.invert = !!cfg.invert;
    if (this.invert) throw new Error('Normalization(invert=True) not supported here');
  }
  build(inputShape) {
    const c = inputShape[inputShape.length - 1];
    if (this.meanC == null) {
      this.mean = this.addWeight('mean', [c], 'float32', tf.initializers.zeros(), undefined, false);
      this.variance = this.addWeight('variance', [c], 'float32', tf.initializers.ones(), undefined, false);
      this.count = this.addWeight('count', [], 'int32', tf.initializers.zeros(), undefined, false);
    }
    this.built = true;
  }
  computeOutputShape(s) {
    return s;
  }
  call(inputs) {
    return tf.tidy(() => {
      const x = first(inputs);
      const mean = this.meanC == null ? this.mean.read() : tf.tensor1d(this.meanC);
      const v = this.varC == null ? this.variance.read() : tf.tensor1d(this.varC);
      return tf.div(tf.sub(x, mean), tf.maximum(tf.sqrt(v), 1e-7));
    });
  }
  getConfig() {
    return Object.assign(super.getConfig(), {axis: this.axis, mean: this.meanC, variance: this.varC});
  }
  static get className() {
    return 'Normalization';
  }
}

class ConstOp extends tf.layers.Layer {
  constructor(cfg) {
    super(cfg);
    this.op = cfg.op; // 'add' | 'mul' (tfjs camel-cases string config values)
    this.y = cfg.y;
  }
  computeOutputShape(s) {
    return s;
  }
  call(inputs) {
    return tf.tidy(() => {
      const x = first(inputs);
      if (this.op === 'add') return tf.add(x, this.y);
      if (this.op === 'mul') return tf.mul(x, this.y);
      throw new Error(`ConstOp op ${this.op}`);
    });
  }
  getConfig() {
    return Object.assign(super.getConfig(), {op: this.op, y: this.y});
  }
  static get className() {
    return 'ConstOp';
  }
}

for (const c of [LayerScale, Normalization, ConstOp]) tf.serialization.registerClass(c);

async function main() {
  const argv = process.argv.slice(2);
  const model = argv[0];
  const inputs = [];
  const outputs = [];
  for (let i = 1; i < argv.length; i++) {
    if (argv[i] === '--input') inputs.push(argv[++i]);
    else if (argv[i] === '--output') outputs.push(argv[++i]);
    else throw new Error(`unexpected argument ${argv[i]}`);
  }
  const m = await oracle.loadModel(model);
  const outs = await oracle.predict(m, inputs.map((f) => npy.read(f)));
  outputs.forEach((f, i) => npy.write(f, outs[i]));
}

main().catch((err) => {
  process.stderr.write(`tfjs_custom: error: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
