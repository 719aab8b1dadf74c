// SPDX-License-Identifier: Apache-2.0
// Run an ONNX model with onnxruntime-node (CPU) on inputs given as JSON
// and print its outputs as JSON: the tests' real-consumer check.
//   node run_model.js MODEL '{"input": {"dims": [1,2], "data": [0, 1]}}'
// Every input is float32 unless it says "type"; inputs not given are zeros
// of the shape the model declares (symbolic dims as 1).
'use strict';
const ort = require('onnxruntime-node');

async function main() {
  const [model, spec] = process.argv.slice(2);
  const given = spec ? JSON.parse(spec) : {};
  const session = await ort.InferenceSession.create(model);
  const feeds = {};
  for (const name of session.inputNames) {
    const g = given[name];
    if (!g) throw new Error(`no value given for input ${name}`);
    const type = g.type || 'float32';
    const Arr = type === 'int64' ? BigInt64Array : Float32Array;
    const data = type === 'int64' ? g.data.map(BigInt) : g.data;
    feeds[name] = new ort.Tensor(type, Arr.from(data), g.dims);
  }
  const out = await session.run(feeds);
  const res = {};
  for (const name of session.outputNames) {
    res[name] = {dims: out[name].dims, data: Array.from(out[name].data, Number)};
  }
  console.log(JSON.stringify(res));
}

main().catch((e) => { console.error(`run_model: ${e.message}`); process.exit(1); });
