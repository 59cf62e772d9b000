'use strict';
// Minimal .npy reader/writer (NumPy format 1.0 written; 1.0/2.0/3.0 read).
//
//   const npy = require('./npy');
//   const {dtype, shape, data} = npy.read('a.npy');  // data: Float32Array | Int32Array
//   npy.write('b.npy', {dtype: 'float32', shape: [2, 3], data});
//
// Written files are little-endian, C order, header padded so that the data
// starts at a multiple of 64 bytes, byte-identical to numpy.save for the same
// array (dtype float32 '<f4' or int32 '<i4').
const fs = require('fs');

const MAGIC = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]); // \x93NUMPY

const DESCR = {
  '<f4': {dtype: 'float32', size: 4, get: (b, o) => b.readFloatLE(o)},
  '<i4': {dtype: 'int32', size: 4, get: (b, o) => b.readInt32LE(o)},
  '<f8': {dtype: 'float32', size: 8, get: (b, o) => b.readDoubleLE(o)},
  '<i8': {dtype: 'int32', size: 8, get: (b, o) => Number(b.readBigInt64LE(o))},
  '<u4': {dtype: 'int32', size: 4, get: (b, o) => b.readUInt32LE(o)},
  '|u1': {dtype: 'int32', size: 1, get: (b, o) => b.readUInt8(o)},
  '|i1': {dtype: 'int32', size: 1, get: (b, o) => b.readInt8(o)},
  '|b1': {dtype: 'int32', size: 1, get: (b, o) => b.readUInt8(o)},
  '<f2': {dtype: 'float32', size: 2, get: (b, o) => halfToFloat(b.readUInt16LE(o))},
};

function halfToFloat(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * f * Math.pow(2, -24);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * (1 + f / 1024) * Math.pow(2, e - 15);
}

function parseHeader(text) {
  const descr = /'descr'\s*:\s*'([^']+)'/.exec(text);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(text);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(text);
  if (!descr || !fortran || !shape) throw new Error(`bad .npy header: ${text}`);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length > 0).map(Number);
  return {descr: descr[1], fortran: fortran[1] === 'True', shape: dims};
}

function read(file) {
  const buf = Buffer.isBuffer(file) ? file : fs.readFileSync(file);
  if (buf.length < 10 || !buf.subarray(0, 6).equals(MAGIC)) throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  let hlen;
  let off;
  if (major === 1) {
    hlen = buf.readUInt16LE(8);
    off = 10;
  } else if (major === 2 || major === 3) {
    hlen = buf.readUInt32LE(8);
    off = 12;
  } else {
    throw new Error(`${file}: unsupported .npy version ${major}`);
  }
  const hdr = parseHeader(buf.toString('latin1', off, off + hlen));
  const info = DESCR[hdr.descr];
  if (!info) throw new Error(`${file}: unsupported dtype ${hdr.descr}`);
  if (hdr.fortran) throw new Error(`${file}: fortran_order arrays are not supported`);
  const n = hdr.shape.reduce((a, b) => a * b, 1);
  const start = off + hlen;
  if (buf.length < start + n * info.size) throw new Error(`${file}: truncated data`);
  const data = info.dtype === 'float32' ? new Float32Array(n) : new Int32Array(n);
  for (let i = 0; i < n; i++) data[i] = info.get(buf, start + i * info.size);
  return {dtype: info.dtype, shape: hdr.shape, data};
}

function encode(arr) {
  const {dtype, shape} = arr;
  const descr = dtype === 'float32' ? '<f4' : dtype === 'int32' ? '<i4' : null;
  if (!descr) throw new Error(`npy.write: unsupported dtype ${dtype}`);
  const n = shape.reduce((a, b) => a * b, 1);
  if (arr.data.length !== n) throw new Error(`npy.write: ${arr.data.length} values for shape [${shape}]`);
  const shapeStr = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shapeStr}, }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const hbuf = Buffer.alloc(10 + header.length);
  MAGIC.copy(hbuf, 0);
  hbuf[6] = 1;
  hbuf[7] = 0;
  hbuf.writeUInt16LE(header.length, 8);
  hbuf.write(header, 10, 'latin1');
  if (require('os').endianness() !== 'LE') throw new Error('big-endian hosts are not supported');
  const typed = dtype === 'float32' ? Float32Array.from(arr.data) : Int32Array.from(arr.data);
  const body = Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength);
  return Buffer.concat([hbuf, body]);
}

function write(file, arr) {
  fs.writeFileSync(file, encode(arr));
}

module.exports = {read, write, encode};
