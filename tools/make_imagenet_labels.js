#!/usr/bin/env node
// Writes data/labels/imagenet.txt: the 1000 ImageNet class names, one per
// line, in class-index order (line N+1 = class N), as kerasc predict prints
// them. Source: the IMAGENET_CLASSES table of the npm package
// @tensorflow-models/mobilenet (Apache-2.0), which is a plain object literal
// {0: 'tench, Tinca tinca', ...}. Provenance: data/labels/README.md.
//
// usage: node tools/make_imagenet_labels.js \
//          /tmp/x/node_modules/@tensorflow-models/mobilenet [data/labels/imagenet.txt]
// (install it into a scratch dir: npm install --ignore-scripts @tensorflow-models/mobilenet)
'use strict';
const fs = require('fs');
const path = require('path');

const pkgDir = process.argv[2];
const out = process.argv[3] || path.join(__dirname, '..', 'data', 'labels', 'imagenet.txt');
if (!pkgDir) {
  console.error('usage: make_imagenet_labels.js MOBILENET_PACKAGE_DIR [OUT]');
  process.exit(2);
}
const { IMAGENET_CLASSES } = require(path.resolve(pkgDir, 'dist', 'imagenet_classes.js'));
const lines = [];
for (let i = 0; i < 1000; i++) {
  const name = IMAGENET_CLASSES[i];
  // One name a line: a newline or an empty name would shift every index.
  if (typeof name !== 'string' || name === '' || /[\r\n]/.test(name))
    throw new Error(`class ${i}: bad name ${JSON.stringify(name)}`);
  lines.push(name);
}
if (Object.keys(IMAGENET_CLASSES).length !== 1000)
  throw new Error(`expected 1000 classes, got ${Object.keys(IMAGENET_CLASSES).length}`);
fs.writeFileSync(out, lines.join('\n') + '\n');
console.log(`wrote ${lines.length} labels to ${out}`);
