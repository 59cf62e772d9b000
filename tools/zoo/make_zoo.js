#!/usr/bin/env node
'use strict';
// Builds the tfjs-oracle part of kerasc's model zoo (tests/zoo/<name>/).
//
//   node tools/zoo/make_zoo.js [--only NAME[,NAME...]] [--list]
//
// For every model below: build it with the tfjs layers API (Keras 2
// semantics), set deterministic weights from a seeded LCG with
// layer.setWeights, save it as a tfjs layers model (model.json + weights.bin,
// captured with tf.io.withSaveHandler), write deterministic inputs
// input_<i>.npy, compute expected_<i>.npy by loading model.json back from disk
// with tools/oracle/run_tfjs.js (cpu backend), and write meta.json.
// tools/zoo/tfjs_to_keras.py then adds model.h5 (Keras 2.15 legacy HDF5) and
// model.keras (Keras 3.6 zip) for the forms listed in meta.json.
//
// Nothing here depends on kerasc. Outputs are byte-for-byte reproducible.
const fs = require('fs');
const path = require('path');
const npy = require('../oracle/npy');
const oracle = require('../oracle/run_tfjs');

const tf = oracle.tf;
const ROOT = path.resolve(__dirname, '..', '..');
const ZOO = path.join(ROOT, 'tests', 'zoo');

// ---------------------------------------------------------------------------
// Deterministic numbers: FNV-1a seeds + 32-bit LCG (Numerical Recipes
// constants). u01() = top 24 bits / 2^24, exactly representable in float32.
// tools/zoo/kzoo.py implements the same generator.

function fnv1a(str) {
  let h = 0x811c9dc5;
  for (let i = 0; i < str.length; i++) {
    h ^= str.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

class Lcg {
  constructor(seed) {
    this.s = seed >>> 0;
  }
  next() {
    this.s = (Math.imul(1664525, this.s) + 1013904223) >>> 0;
    return this.s;
  }
  u01() {
    return (this.next() >>> 8) / 16777216;
  }
  sym() {
    return 2 * this.u01() - 1;
  }
}

// Values for one weight variable, chosen so that activations stay O(1).
function weightValues(rng, varName, shape) {
  const n = shape.reduce((a, b) => a * b, 1);
  const out = new Float32Array(n);
  const leaf = varName.split('/').pop();
  let f;
  if (leaf === 'moving_variance' || leaf === 'gamma') {
    f = () => 0.5 + rng.u01();
  } else if (leaf === 'moving_mean' || leaf === 'beta' || leaf === 'bias') {
    f = () => 0.3 * rng.sym();
  } else if (leaf === 'alpha') {
    f = () => 0.05 + 0.4 * rng.u01();
  } else if (leaf === 'embeddings') {
    f = () => rng.sym();
  } else {
    let fanIn = shape.length >= 2 ? shape.slice(0, -1).reduce((a, b) => a * b, 1) : 1;
    if (leaf === 'depthwise_kernel') fanIn = shape[0] * shape[1];
    const s = Math.sqrt(3 / Math.max(fanIn, 1));
    f = () => s * rng.sym();
  }
  for (let i = 0; i < n; i++) out[i] = f();
  return out;
}

function setDeterministicWeights(model, name) {
  const rng = new Lcg(fnv1a(`${name}/weights`));
  const seen = new Set();
  for (const layer of model.layers) {
    if (seen.has(layer)) continue;
    seen.add(layer);
    const ws = layer.weights;
    if (ws.length === 0) continue;
    const vals = ws.map((w) => tf.tensor(weightValues(rng, w.originalName, w.shape), w.shape, w.dtype));
    layer.setWeights(vals);
    vals.forEach((t) => t.dispose());
  }
}

// Input arrays: uniform in [-scale, scale] (float) or ints in [lo, hi).
function makeInput(name, i, spec) {
  const rng = new Lcg(fnv1a(`${name}/input_${i}`));
  const shape = spec.shape;
  const n = shape.reduce((a, b) => a * b, 1);
  if (spec.dtype === 'int32') {
    const data = new Int32Array(n);
    for (let k = 0; k < n; k++) data[k] = spec.lo + Math.floor(rng.u01() * (spec.hi - spec.lo));
    if (spec.post) spec.post(data, shape);
    return {dtype: 'int32', shape, data};
  }
  const data = new Float32Array(n);
  const scale = spec.scale == null ? 1 : spec.scale;
  for (let k = 0; k < n; k++) data[k] = scale * rng.sym();
  if (spec.post) spec.post(data, shape);
  return {dtype: 'float32', shape, data};
}

// ---------------------------------------------------------------------------
// Model definitions. Layer names follow Keras' defaults (dense, dense_1, ...)
// so that the converted .h5/.keras files look like what Keras writes.

function namer() {
  const counts = {};
  return (base) => {
    const k = counts[base] === undefined ? 0 : counts[base] + 1;
    counts[base] = k;
    return k === 0 ? base : `${base}_${k}`;
  };
}

// L(kind, args): tf.layers[kind] with an auto Keras-style name.
function layerFactory() {
  const nm = namer();
  const snake = {
    dense: 'dense', conv1d: 'conv1d', conv2d: 'conv2d', depthwiseConv2d: 'depthwise_conv2d',
    separableConv2d: 'separable_conv2d', conv2dTranspose: 'conv2d_transpose',
    maxPooling1d: 'max_pooling1d', maxPooling2d: 'max_pooling2d', averagePooling1d: 'average_pooling1d',
    averagePooling2d: 'average_pooling2d', globalAveragePooling1d: 'global_average_pooling1d',
    globalAveragePooling2d: 'global_average_pooling2d', globalMaxPooling1d: 'global_max_pooling1d',
    globalMaxPooling2d: 'global_max_pooling2d', batchNormalization: 'batch_normalization',
    layerNormalization: 'layer_normalization', zeroPadding2d: 'zero_padding2d', cropping2D: 'cropping2d',
    upSampling2d: 'up_sampling2d', flatten: 'flatten', reshape: 'reshape', permute: 'permute',
    repeatVector: 'repeat_vector', add: 'add', multiply: 'multiply', average: 'average',
    maximum: 'maximum', minimum: 'minimum', concatenate: 'concatenate', dot: 'dot',
    activation: 'activation', reLU: 're_lu', leakyReLU: 'leaky_re_lu', prelu: 'p_re_lu', elu: 'elu',
    softmax: 'softmax', thresholdedReLU: 'thresholded_re_lu', embedding: 'embedding', lstm: 'lstm',
    gru: 'gru', simpleRNN: 'simple_rnn', bidirectional: 'bidirectional', timeDistributed: 'time_distributed',
    masking: 'masking', dropout: 'dropout', spatialDropout1d: 'spatial_dropout1d',
    gaussianNoise: 'gaussian_noise', gaussianDropout: 'gaussian_dropout', alphaDropout: 'alpha_dropout',
  };
  const L = (kind, args = {}) => {
    if (!snake[kind]) throw new Error(`no snake name for ${kind}`);
    return tf.layers[kind]({...args, name: args.name || nm(snake[kind])});
  };
  L.input = (shape, dtype) => tf.input({shape, dtype: dtype || 'float32', name: nm('input_layer')});
  return L;
}

const F32 = (shape, scale) => ({shape, dtype: 'float32', scale: scale == null ? 1 : scale});
const I32 = (shape, lo, hi, post) => ({shape, dtype: 'int32', lo, hi, post});
const ALL = ['tfjs', 'h5', 'keras'];
const B = 2; // batch size of every zoo input

function sequential(name, inShape, layers) {
  const m = tf.sequential({name});
  layers.forEach((mk, i) => m.add(i === 0 ? mk({inputShape: inShape}) : mk({})));
  return m;
}

// Builds a Sequential from [kind, args] pairs.
function seqModel(name, inShape, specs) {
  const L = layerFactory();
  return sequential(name, inShape, specs.map(([kind, args]) => (extra) => L(kind, {...args, ...extra})));
}

const MODELS = [];
function def(name, layers, inputs, build, opts = {}) {
  MODELS.push({name, layers, inputs, build, forms: opts.forms || ALL, note: opts.note || ''});
}

// --- Dense + activations ---------------------------------------------------
const ACTS = ['relu', 'sigmoid', 'tanh', 'softmax', 'linear', 'elu', 'selu', 'softplus', 'softsign',
  'swish', 'gelu', 'relu6', 'mish', 'hard_sigmoid'];
const TFJS_ACT = {hard_sigmoid: 'hardSigmoid'};
for (const act of ACTS) {
  const forms = act === 'hard_sigmoid' ? ['tfjs', 'h5'] : ALL;
  const note = act === 'hard_sigmoid' ?
    'Keras 2 hard_sigmoid = clip(0.2x+0.5); no .keras form (Keras 3 redefined it as relu6(x+3)/6, see numpy model k3_activations)' : `activation '${act}' on both Dense layers`;
  def(`dense_${act}`, ['Dense'], [F32([B, 8], 2)], () => seqModel(`dense_${act}`, [8], [
    ['dense', {units: 12, activation: TFJS_ACT[act] || act}],
    ['dense', {units: 5, activation: TFJS_ACT[act] || act}],
  ]), {forms, note});
}
def('dense_nobias_3d', ['Dense'], [F32([B, 3, 7])], () => seqModel('dense_nobias_3d', [3, 7], [
  ['dense', {units: 4, useBias: false}],
  ['dense', {units: 6, activation: 'tanh'}],
]), {note: 'Dense on a rank-3 input (applied over the last axis), use_bias=False'});

// --- Conv2D ----------------------------------------------------------------
def('conv2d_s1_valid', ['Conv2D'], [F32([B, 8, 8, 3])], () => seqModel('conv2d_s1_valid', [8, 8, 3], [
  ['conv2d', {filters: 4, kernelSize: 3, padding: 'valid', activation: 'relu'}],
  ['conv2d', {filters: 5, kernelSize: [2, 3], padding: 'valid'}],
]));
def('conv2d_s2_same_odd', ['Conv2D'], [F32([B, 9, 9, 3])], () => seqModel('conv2d_s2_same_odd', [9, 9, 3], [
  ['conv2d', {filters: 4, kernelSize: 3, strides: 2, padding: 'same'}],
  ['conv2d', {filters: 3, kernelSize: 2, strides: 2, padding: 'same'}],
]), {note: 'stride 2 same on odd sizes: 9->5 (k3), 5->3 (k2, pad after only)'});
def('conv2d_s2_same_even', ['Conv2D'], [F32([B, 8, 8, 2])], () => seqModel('conv2d_s2_same_even', [8, 8, 2], [
  ['conv2d', {filters: 4, kernelSize: 3, strides: 2, padding: 'same'}],
  ['conv2d', {filters: 3, kernelSize: 4, strides: 1, padding: 'same'}],
]), {note: 'stride 2 same on even size (extra pad bottom/right), even kernel 4 same (pad 1 before, 2 after)'});
def('conv2d_s2_valid_rect', ['Conv2D'], [F32([B, 9, 8, 3])], () => seqModel('conv2d_s2_valid_rect', [9, 8, 3], [
  ['conv2d', {filters: 4, kernelSize: [3, 2], strides: [2, 1], padding: 'valid'}],
]));
def('conv2d_dilation2', ['Conv2D'], [F32([B, 10, 10, 3])], () => seqModel('conv2d_dilation2', [10, 10, 3], [
  ['conv2d', {filters: 4, kernelSize: 3, dilationRate: 2, padding: 'same', activation: 'relu'}],
  ['conv2d', {filters: 3, kernelSize: 3, dilationRate: [2, 1], padding: 'valid'}],
]));
def('conv2d_nobias', ['Conv2D'], [F32([B, 6, 6, 3])], () => seqModel('conv2d_nobias', [6, 6, 3], [
  ['conv2d', {filters: 5, kernelSize: 3, padding: 'same', useBias: false}],
]));

// --- Conv1D ----------------------------------------------------------------
def('conv1d_valid_same', ['Conv1D'], [F32([B, 12, 3])], () => seqModel('conv1d_valid_same', [12, 3], [
  ['conv1d', {filters: 4, kernelSize: 3, padding: 'valid', activation: 'relu'}],
  ['conv1d', {filters: 5, kernelSize: 4, strides: 2, padding: 'same'}],
]));
// Conv1D padding='causal' is not implemented by tfjs: numpy model conv1d_causal.

// --- Depthwise / separable / transpose ------------------------------------
def('depthwise_conv2d_dm2', ['DepthwiseConv2D'], [F32([B, 8, 8, 3])], () => seqModel('depthwise_conv2d_dm2', [8, 8, 3], [
  ['depthwiseConv2d', {kernelSize: 3, depthMultiplier: 2, padding: 'same'}],
  ['depthwiseConv2d', {kernelSize: 3, depthMultiplier: 1, strides: 2, padding: 'valid', useBias: false}],
]));
// MobileNetV1's chain: 1x1 -> depthwise -> 1x1 -> depthwise -> 1x1, none
// widening, so that a 1x1 is both one block's projection and the next
// block's expansion (runtime/fuse.c must not fuse a block on a node an
// earlier block absorbed)
def('mobilenet_v1_chain', ['Conv2D', 'DepthwiseConv2D'], [F32([B, 12, 12, 16])], () => seqModel('mobilenet_v1_chain', [12, 12, 16], [
  ['conv2d', {filters: 16, kernelSize: 1, activation: 'relu6'}],
  ['depthwiseConv2d', {kernelSize: 3, padding: 'same', activation: 'relu6'}],
  ['conv2d', {filters: 16, kernelSize: 1, activation: 'relu6'}],
  ['depthwiseConv2d', {kernelSize: 3, padding: 'same', activation: 'relu6'}],
  ['conv2d', {filters: 16, kernelSize: 1, activation: 'relu6'}],
  ['depthwiseConv2d', {kernelSize: 3, strides: 2, padding: 'same', activation: 'relu6'}],
  ['conv2d', {filters: 16, kernelSize: 1}],
]));
def('separable_conv2d', ['SeparableConv2D'], [F32([B, 8, 8, 3])], () => seqModel('separable_conv2d', [8, 8, 3], [
  ['separableConv2d', {filters: 4, kernelSize: 3, padding: 'same', activation: 'relu'}],
  ['separableConv2d', {filters: 5, kernelSize: 3, depthMultiplier: 2, strides: 2, padding: 'valid'}],
]));
def('conv2d_transpose', ['Conv2DTranspose'], [F32([B, 4, 5, 3])], () => {
  const L = layerFactory();
  const x = L.input([4, 5, 3]);
  const a = L('conv2dTranspose', {filters: 4, kernelSize: 3, strides: 2, padding: 'same'}).apply(x);
  const b = L('conv2dTranspose', {filters: 2, kernelSize: 3, strides: 2, padding: 'valid'}).apply(x);
  const c = L('conv2dTranspose', {filters: 3, kernelSize: 4, strides: 2, padding: 'same', activation: 'relu'}).apply(x);
  return tf.model({inputs: x, outputs: [a, b, c], name: 'conv2d_transpose'});
}, {note: '3 outputs: k3 s2 same (8x10), k3 s2 valid (9x11), k4 s2 same (8x10)'});

// --- Pooling ---------------------------------------------------------------
def('max_pooling', ['MaxPooling1D', 'MaxPooling2D'], [F32([B, 7, 7, 3]), F32([B, 9, 4])], () => {
  const L = layerFactory();
  const x = L.input([7, 7, 3]);
  const s = L.input([9, 4]);
  const a = L('maxPooling2d', {poolSize: 2}).apply(x);
  const b = L('maxPooling2d', {poolSize: 3, strides: 2, padding: 'same'}).apply(x);
  const c = L('maxPooling1d', {poolSize: 2}).apply(s);
  const d = L('maxPooling1d', {poolSize: 3, strides: 2, padding: 'same'}).apply(s);
  return tf.model({inputs: [x, s], outputs: [a, b, c, d], name: 'max_pooling'});
});
def('average_pooling', ['AveragePooling1D', 'AveragePooling2D'], [F32([B, 7, 7, 3]), F32([B, 9, 4])], () => {
  const L = layerFactory();
  const x = L.input([7, 7, 3]);
  const s = L.input([9, 4]);
  const a = L('averagePooling2d', {poolSize: 2, padding: 'same'}).apply(x);
  const b = L('averagePooling2d', {poolSize: 3, strides: 1, padding: 'same'}).apply(x);
  const c = L('averagePooling2d', {poolSize: [2, 3], strides: [2, 2], padding: 'valid'}).apply(x);
  const d = L('averagePooling1d', {poolSize: 2, padding: 'same'}).apply(s);
  return tf.model({inputs: [x, s], outputs: [a, b, c, d], name: 'average_pooling'});
}, {note: "same padding on odd sizes: windows at the border average only the real (non-padded) elements"});
def('global_pooling', ['GlobalAveragePooling1D', 'GlobalAveragePooling2D', 'GlobalMaxPooling1D', 'GlobalMaxPooling2D'],
  [F32([B, 5, 6, 3]), F32([B, 7, 4])], () => {
    const L = layerFactory();
    const x = L.input([5, 6, 3]);
    const s = L.input([7, 4]);
    const outs = [
      L('globalAveragePooling2d').apply(x), L('globalMaxPooling2d').apply(x),
      L('globalAveragePooling1d').apply(s), L('globalMaxPooling1d').apply(s),
    ];
    return tf.model({inputs: [x, s], outputs: outs, name: 'global_pooling'});
  });

// --- Normalization ---------------------------------------------------------
def('batchnorm_conv', ['Conv2D', 'BatchNormalization'], [F32([B, 6, 6, 3])], () => seqModel('batchnorm_conv', [6, 6, 3], [
  ['conv2d', {filters: 4, kernelSize: 3, padding: 'same', useBias: false}],
  ['batchNormalization', {epsilon: 0.01}],
  ['activation', {activation: 'relu'}],
  ['batchNormalization', {epsilon: 1e-5, center: false}],
]), {note: 'epsilon 0.01 and 1e-5 (non-default), second BN with center=False (no beta)'});
def('batchnorm_dense', ['Dense', 'BatchNormalization'], [F32([B, 10])], () => seqModel('batchnorm_dense', [10], [
  ['dense', {units: 8}],
  ['batchNormalization', {epsilon: 1e-4}],
  ['batchNormalization', {epsilon: 0.1, scale: false}],
]), {note: 'after Dense, epsilon 1e-4; second BN scale=False (no gamma), epsilon 0.1'});
def('layer_norm', ['LayerNormalization'], [F32([B, 5, 8], 2)], () => seqModel('layer_norm', [5, 8], [
  ['layerNormalization', {epsilon: 1e-5}],
  ['dense', {units: 6}],
  ['layerNormalization', {}],
]), {note: 'over the last axis; epsilon 1e-5 and default 1e-3'});

// --- Reshaping ---------------------------------------------------------------
def('zero_padding_cropping', ['ZeroPadding2D', 'Cropping2D'], [F32([B, 5, 6, 2])], () => seqModel('zero_padding_cropping', [5, 6, 2], [
  ['zeroPadding2d', {padding: [[1, 2], [0, 3]]}],
  ['conv2d', {filters: 3, kernelSize: 2}],
  ['cropping2D', {cropping: [[1, 0], [2, 1]]}],
]), {note: 'asymmetric ((1,2),(0,3)) padding, asymmetric ((1,0),(2,1)) cropping'});
def('upsampling2d_nearest', ['UpSampling2D'], [F32([B, 3, 4, 2])], () => seqModel('upsampling2d_nearest', [3, 4, 2], [
  ['upSampling2d', {size: [2, 3]}],
  ['conv2d', {filters: 2, kernelSize: 2}],
]));
def('reshape_ops', ['Flatten', 'Reshape', 'Permute', 'RepeatVector'], [F32([B, 4, 3, 2])], () => {
  const L = layerFactory();
  const x = L.input([4, 3, 2]);
  const f = L('flatten').apply(x);
  const d = L('dense', {units: 5}).apply(f);
  const r = L('reshape', {targetShape: [6, 4]}).apply(x);
  const r2 = L('reshape', {targetShape: [-1, 3]}).apply(r);
  const p = L('permute', {dims: [2, 1]}).apply(r);
  const p3 = L('permute', {dims: [3, 1, 2]}).apply(x);
  const rv = L('repeatVector', {n: 3}).apply(d);
  return tf.model({inputs: x, outputs: [d, r2, p, p3, rv], name: 'reshape_ops'});
}, {note: 'Flatten+Dense (channels_last flatten order), Reshape with -1, Permute 2-D and 3-D, RepeatVector'});

// --- Merging ---------------------------------------------------------------
def('merge_ops', ['Add', 'Multiply', 'Average', 'Maximum', 'Minimum', 'Concatenate'],
  [F32([B, 3, 4]), F32([B, 3, 4]), F32([B, 3, 4])], () => {
    const L = layerFactory();
    const a = L.input([3, 4]);
    const b = L.input([3, 4]);
    const c = L.input([3, 4]);
    const outs = [
      L('add').apply([a, b, c]), L('multiply').apply([a, b]), L('average').apply([a, b, c]),
      L('maximum').apply([a, b]), L('minimum').apply([a, b, c]),
      L('concatenate', {axis: -1}).apply([a, b]), L('concatenate', {axis: 1}).apply([a, b, c]),
    ];
    return tf.model({inputs: [a, b, c], outputs: outs, name: 'merge_ops'});
  }, {note: 'Concatenate on axis -1 and axis 1; 3-input Add/Average/Minimum'});
def('dot', ['Dot'], [F32([B, 6]), F32([B, 6]), F32([B, 3, 4]), F32([B, 5, 4])], () => {
  const L = layerFactory();
  const a = L.input([6]);
  const b = L.input([6]);
  const s = L.input([3, 4]);
  const t = L.input([5, 4]);
  const outs = [
    L('dot', {axes: 1}).apply([a, b]),
    L('dot', {axes: 1, normalize: true}).apply([a, b]),
    L('dot', {axes: [2, 2]}).apply([s, t]),
    L('dot', {axes: [1, 1]}).apply([L('permute', {dims: [2, 1]}).apply(s), L('permute', {dims: [2, 1]}).apply(t)]),
  ];
  return tf.model({inputs: [a, b, s, t], outputs: outs, name: 'dot'});
}, {note: 'rank-2 dot (output (B,1)), normalize=True (cosine), rank-3 batch dot axes [2,2] and [1,1]'});

// --- Activation layers ------------------------------------------------------
def('activation_layers', ['Activation', 'ReLU', 'LeakyReLU', 'PReLU', 'ELU', 'Softmax'], [F32([B, 4, 5, 3], 3)], () => {
  const L = layerFactory();
  const x = L.input([4, 5, 3]);
  const outs = [
    L('activation', {activation: 'tanh'}).apply(x),
    L('activation', {activation: 'softplus'}).apply(x),
    L('reLU', {maxValue: 6}).apply(L('dense', {units: 3}).apply(x)),
    L('leakyReLU', {alpha: 0.1}).apply(x),
    L('prelu', {sharedAxes: [1, 2]}).apply(x),
    L('prelu').apply(x),
    L('elu').apply(x),
    L('softmax', {axis: -1}).apply(x),
  ];
  return tf.model({inputs: x, outputs: outs, name: 'activation_layers'});
}, {note: 'ReLU(max_value=6), LeakyReLU(0.1), PReLU shared_axes=[1,2] and unshared, ELU (alpha 1; tfjs cannot do other alphas, see numpy model activation_layers_k3), Softmax default axis (tfjs cannot do axis=1: numpy model activation_layers_k3)'});
def('thresholded_relu', ['ThresholdedReLU'], [F32([B, 6], 2)], () => seqModel('thresholded_relu', [6], [
  ['thresholdedReLU', {theta: 0.5}],
]), {forms: ['tfjs', 'h5'], note: 'ThresholdedReLU was removed in Keras 3: no .keras form'});

// --- Embedding / recurrent ---------------------------------------------------
def('embedding', ['Embedding', 'Flatten', 'Dense'], [I32([B, 7], 0, 20)], () => seqModel('embedding', [7], [
  ['embedding', {inputDim: 20, outputDim: 5}],
  ['flatten', {}],
  ['dense', {units: 3}],
]), {note: 'int32 token input in [0, 20)'});
const RA = {recurrentActivation: 'sigmoid'}; // Keras default; tfjs' own default is hard_sigmoid
def('lstm', ['LSTM'], [F32([B, 6, 4])], () => seqModel('lstm', [6, 4], [
  ['lstm', {units: 5, returnSequences: true, ...RA}],
  ['lstm', {units: 3, ...RA}],
]), {note: 'return_sequences True then False'});
def('lstm_go_backwards', ['LSTM'], [F32([B, 6, 4])], () => {
  const L = layerFactory();
  const x = L.input([6, 4]);
  const a = L('lstm', {units: 4, returnSequences: true, goBackwards: true, ...RA}).apply(x);
  const b = L('lstm', {units: 3, goBackwards: true, ...RA}).apply(x);
  return tf.model({inputs: x, outputs: [a, b], name: 'lstm_go_backwards'});
}, {note: 'go_backwards with return_sequences (output in reversed time order) and without'});
def('lstm_hard_sigmoid_k2', ['LSTM'], [F32([B, 5, 3])], () => seqModel('lstm_hard_sigmoid_k2', [5, 3], [
  ['lstm', {units: 4, recurrentActivation: 'hardSigmoid'}],
]), {forms: ['tfjs', 'h5'], note: 'Keras 2 default recurrent_activation hard_sigmoid = clip(0.2x+0.5) (standalone Keras <= 2.2); no .keras form'});
def('gru_v1', ['GRU'], [F32([B, 6, 4])], () => {
  const L = layerFactory();
  const x = L.input([6, 4]);
  const a = L('gru', {units: 5, returnSequences: true, resetAfter: false, ...RA}).apply(x);
  const b = L('gru', {units: 3, resetAfter: false, goBackwards: true, ...RA}).apply(a);
  return tf.model({inputs: x, outputs: [a, b], name: 'gru_v1'});
}, {note: 'reset_after=False (bias (3u,)); reset_after=True is numpy model gru_reset_after'});
def('simple_rnn', ['SimpleRNN'], [F32([B, 6, 4])], () => seqModel('simple_rnn', [6, 4], [
  ['simpleRNN', {units: 5, returnSequences: true}],
  ['simpleRNN', {units: 3, activation: 'relu', goBackwards: true}],
]));
for (const mode of ['concat', 'sum', 'ave', 'mul']) {
  def(`bidirectional_${mode}`, ['Bidirectional', 'LSTM', 'GRU'], [F32([B, 5, 3])], () => {
    const L = layerFactory();
    const x = L.input([5, 3]);
    const a = L('bidirectional', {layer: L('lstm', {units: 4, returnSequences: true, ...RA}), mergeMode: mode}).apply(x);
    const b = L('bidirectional', {layer: L('gru', {units: 3, resetAfter: false, ...RA}), mergeMode: mode}).apply(a);
    return tf.model({inputs: x, outputs: [a, b], name: `bidirectional_${mode}`});
  }, {note: `merge_mode ${mode}; LSTM with return_sequences, then GRU without`});
}
def('time_distributed', ['TimeDistributed', 'Dense'], [F32([B, 4, 6])], () => seqModel('time_distributed', [4, 6], [
  ['timeDistributed', {layer: tf.layers.dense({units: 3, activation: 'relu', name: 'dense'})}],
]));
def('masking_lstm', ['Masking', 'LSTM'], [F32([B, 7, 3])], () => seqModel('masking_lstm', [7, 3], [
  ['masking', {maskValue: 0}],
  ['lstm', {units: 4, ...RA}],
]), {note: 'sample 0 post-padded (last 3 steps zero), sample 1 pre-padded (first 2 steps zero) plus one zero step inside; return_sequences=False'});

// --- Identity at inference ---------------------------------------------------
def('dropout_identity', ['Dropout', 'SpatialDropout1D', 'GaussianNoise', 'GaussianDropout', 'AlphaDropout'], [F32([B, 5, 4])],
  () => seqModel('dropout_identity', [5, 4], [
    ['dropout', {rate: 0.5}],
    ['spatialDropout1d', {rate: 0.3}],
    ['dense', {units: 3}],
    ['gaussianNoise', {stddev: 0.5}],
    ['gaussianDropout', {rate: 0.4}],
    ['alphaDropout', {rate: 0.2}],
  ]));

// --- Graph structure -----------------------------------------------------------
def('multi_input', ['Dense', 'Concatenate'], [F32([B, 4]), F32([B, 6]), I32([B, 3], 0, 10)], () => {
  const L = layerFactory();
  const a = L.input([4]);
  const b = L.input([6]);
  const t = L.input([3], 'int32');
  const e = L('flatten').apply(L('embedding', {inputDim: 10, outputDim: 2}).apply(t));
  const x = L('concatenate').apply([L('dense', {units: 5, activation: 'relu'}).apply(a), b, e]);
  const y = L('dense', {units: 2, activation: 'softmax'}).apply(x);
  return tf.model({inputs: [a, b, t], outputs: y, name: 'multi_input'});
}, {note: '3 inputs (2 float32, 1 int32)'});
def('multi_output', ['Conv2D', 'GlobalAveragePooling2D', 'Dense'], [F32([B, 6, 6, 2])], () => {
  const L = layerFactory();
  const x = L.input([6, 6, 2]);
  const h = L('conv2d', {filters: 4, kernelSize: 3, activation: 'relu'}).apply(x);
  const g = L('globalAveragePooling2d').apply(h);
  const o1 = L('dense', {units: 1, name: 'age_output'}).apply(g);
  const o2 = L('dense', {units: 3, activation: 'softmax', name: 'class_output'}).apply(g);
  return tf.model({inputs: x, outputs: [o2, o1, h], name: 'multi_output'});
}, {note: 'outputs listed in a different order than created: [class_output, age_output, conv2d]'});
def('shared_layer', ['Dense', 'Multiply', 'Concatenate'], [F32([B, 5]), F32([B, 5])], () => {
  const L = layerFactory();
  const a = L.input([5]);
  const b = L.input([5]);
  const shared = L('dense', {units: 4, activation: 'tanh'});
  const ea = shared.apply(a);
  const eb = shared.apply(b);
  const m = L('multiply').apply([ea, eb]);
  const shared2 = L('dense', {units: 4});
  const z = shared2.apply(shared2.apply(m)); // the same layer applied to its own output
  const out = L('dense', {units: 2}).apply(L('concatenate').apply([ea, eb, z]));
  return tf.model({inputs: [a, b], outputs: [out, eb], name: 'shared_layer'});
}, {note: 'one Dense called on two inputs (node indices 0 and 1); another Dense called twice in a chain'});
def('nested_sequential', ['Sequential', 'Dense', 'BatchNormalization'], [F32([B, 6])], () => {
  const L = layerFactory();
  const inner = tf.sequential({name: 'sequential'});
  inner.add(L('dense', {units: 5, activation: 'relu', inputShape: [4]}));
  inner.add(L('batchNormalization', {epsilon: 0.01}));
  inner.add(L('dense', {units: 3}));
  const x = L.input([6]);
  const h = L('dense', {units: 4}).apply(x);
  const y = inner.apply(h);
  const out = L('dense', {units: 2}).apply(y);
  return tf.model({inputs: x, outputs: [out, y], name: 'nested_sequential'});
}, {note: 'a Sequential (Dense, BN, Dense) used as a layer of a Functional model; its output is also a model output'});
def('nested_functional', ['Functional', 'Conv2D', 'Add'], [F32([B, 6, 6, 3])], () => {
  const L = layerFactory();
  const bi = L.input([6, 6, 3]);
  const c1 = L('conv2d', {filters: 3, kernelSize: 3, padding: 'same', activation: 'relu'}).apply(bi);
  const res = L('add').apply([bi, c1]);
  const block = tf.model({inputs: bi, outputs: res, name: 'block'});
  const x = L.input([6, 6, 3]);
  const y1 = block.apply(x);
  const y2 = L('conv2d', {filters: 2, kernelSize: 3}).apply(y1);
  return tf.model({inputs: x, outputs: [y2, y1], name: 'nested_functional'});
}, {note: 'a Functional residual block used as a layer of a Functional model'});

// ---------------------------------------------------------------------------

function weightDataToBuffer(wd) {
  if (Array.isArray(wd)) return Buffer.concat(wd.map((b) => Buffer.from(b)));
  return Buffer.from(wd);
}

// tfjs 4.22 forgets SeparableConv2D's depth_multiplier in getConfig(); put
// it back (it is a Keras 2 config key) so that the saved model reloads.
function fixTopology(topology, model) {
  const byName = new Map();
  const collect = (m) => m.layers.forEach((l) => {
    byName.set(l.name, l);
    if (l.layers) collect(l);
  });
  collect(model);
  const walk = (node) => {
    if (Array.isArray(node)) return node.forEach(walk);
    if (!node || typeof node !== 'object') return;
    if (node.class_name === 'SeparableConv2D' && node.config && node.config.depth_multiplier === undefined) {
      node.config.depth_multiplier = byName.get(node.config.name).depthMultiplier;
    }
    Object.values(node).forEach(walk);
  };
  walk(topology);
}

async function saveTfjs(model, dir) {
  let art;
  await model.save(tf.io.withSaveHandler(async (a) => {
    art = a;
    return {modelArtifactsInfo: {dateSaved: new Date(0), modelTopologyType: 'JSON'}};
  }));
  fixTopology(art.modelTopology, model);
  const bin = weightDataToBuffer(art.weightData);
  fs.writeFileSync(path.join(dir, 'weights.bin'), bin);
  const json = {
    format: 'layers-model',
    generatedBy: `TensorFlow.js tfjs-layers v${tf.version.tfjs}`,
    convertedBy: null,
    modelTopology: art.modelTopology,
    weightsManifest: [{paths: ['weights.bin'], weights: art.weightSpecs}],
  };
  fs.writeFileSync(path.join(dir, 'model.json'), JSON.stringify(json, null, 1) + '\n');
}

function sameArrays(a, b) {
  if (a.data.length !== b.data.length) return false;
  for (let i = 0; i < a.data.length; i++) if (a.data[i] !== b.data[i] && !(isNaN(a.data[i]) && isNaN(b.data[i]))) return false;
  return true;
}

function postMasking(data, shape) {
  // sample 0: last 3 timesteps zero; sample 1: first 2 and step 4 zero.
  const [b, t, f] = shape;
  const zero = (s, k) => { for (let j = 0; j < f; j++) data[(s * t + k) * f + j] = 0; };
  for (let k = t - 3; k < t; k++) zero(0, k);
  if (b > 1) { zero(1, 0); zero(1, 1); zero(1, 4); }
}

async function buildOne(m) {
  const dir = path.join(ZOO, m.name);
  fs.rmSync(dir, {recursive: true, force: true});
  fs.mkdirSync(dir, {recursive: true});
  const model = m.build();
  // Model names never equal a layer name (a model 'lstm' holding a layer 'lstm' is legal but a
  // distraction when a loader is debugged).
  model.name = `zoo_${m.name}`;
  setDeterministicWeights(model, m.name);
  await saveTfjs(model, dir);
  if (m.name === 'masking_lstm') m.inputs[0].post = postMasking;
  const inputs = m.inputs.map((spec, i) => makeInput(m.name, i, spec));
  inputs.forEach((a, i) => npy.write(path.join(dir, `input_${i}.npy`), a));
  // Reference: the model read back from disk by the oracle.
  const loaded = await oracle.loadModel(path.join(dir, 'model.json'));
  const outs = await oracle.predict(loaded, inputs.map((_, i) => npy.read(path.join(dir, `input_${i}.npy`))));
  // Sanity: the in-memory model gives bit-identical results.
  const direct = await oracle.predict(model, inputs);
  outs.forEach((o, i) => {
    if (!sameArrays(o, direct[i])) throw new Error(`${m.name}: output ${i} differs between saved and in-memory model`);
    for (const v of o.data) if (!Number.isFinite(v)) throw new Error(`${m.name}: non-finite output`);
  });
  outs.forEach((o, i) => npy.write(path.join(dir, `expected_${i}.npy`), o));
  const forms = {};
  if (m.forms.includes('tfjs')) forms.tfjs = 'model.json';
  if (m.forms.includes('h5')) forms.h5 = 'model.h5';
  if (m.forms.includes('keras')) forms.keras = 'model.keras';
  const meta = {
    name: m.name,
    oracle: 'tfjs',
    layers: m.layers,
    note: m.note,
    forms,
    inputs: inputs.map((a, i) => ({file: `input_${i}.npy`, dtype: a.dtype, shape: a.shape})),
    outputs: outs.map((o, i) => ({file: `expected_${i}.npy`, dtype: o.dtype, shape: o.shape})),
    tolerance: 'max|kerasc - expected| <= 1e-4 * max(1, max|expected|)',
  };
  fs.writeFileSync(path.join(dir, 'meta.json'), JSON.stringify(meta, null, 1) + '\n');
  model.dispose();
  loaded.dispose();
  return meta;
}

async function main() {
  const argv = process.argv.slice(2);
  let only = null;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--only') only = new Set(argv[++i].split(','));
    else if (argv[i] === '--list') {
      MODELS.forEach((m) => console.log(m.name));
      return;
    } else throw new Error(`unknown argument ${argv[i]}`);
  }
  await tf.setBackend('cpu');
  tf.backend().firstUse = false;
  fs.mkdirSync(ZOO, {recursive: true});
  const names = new Set(MODELS.map((m) => m.name));
  if (names.size !== MODELS.length) throw new Error('duplicate model names');
  if (!only) {
    // Remove tfjs-oracle models that are no longer defined here.
    for (const d of fs.readdirSync(ZOO)) {
      const metaFile = path.join(ZOO, d, 'meta.json');
      if (!fs.existsSync(metaFile)) continue;
      const meta = JSON.parse(fs.readFileSync(metaFile, 'utf8'));
      if (meta.oracle === 'tfjs' && !names.has(d)) fs.rmSync(path.join(ZOO, d), {recursive: true, force: true});
    }
  }
  for (const m of MODELS) {
    if (only && !only.has(m.name)) continue;
    const meta = await buildOne(m);
    console.log(`${m.name}: ${meta.outputs.map((o) => JSON.stringify(o.shape)).join(' ')}`);
  }
}

main().catch((err) => {
  console.error(`make_zoo: error: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
