// The Node.js side of the property tests in tests/test_hashing.py: one long-lived process that
// answers JSON lines on stdin with JSON lines on stdout.
//
// Request:  {"op": "stringify", "values": [...]}  values in the tagged form of make_hash_vectors.mjs
//           {"op": "strings", "values": ["...", ...]}
// Response: {"results": [{"text": ..., "sha256": ...}, ...]}   for "stringify"
//           {"results": [{"sha256": ..., "length": ...}, ...]} for "strings"
//           {"error": "..."} when a request cannot be answered
import { createInterface } from "node:readline";
import { sha256Hex, stableStringify } from "./stable_stringify.mjs";

// Tags become the values they stand for; a reviver returning undefined drops an object key and
// leaves a hole in an array, which is exactly how JSON.stringify treats undefined.
function revive(_key, value) {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const keys = Object.keys(value);
    if (keys.length === 1) {
      if (keys[0] === "$absent") return undefined;
      if (keys[0] === "$float") return Number(value.$float);
      if (keys[0] === "$int") return Number(value.$int);
    }
  }
  return value;
}

function answer(request) {
  if (request.op === "stringify") {
    return request.values.map((value) => {
      const text = stableStringify(value);
      return { text, sha256: sha256Hex(text) };
    });
  }
  if (request.op === "strings") {
    return request.values.map((s) => ({ sha256: sha256Hex(s), length: s.length }));
  }
  throw new Error(`unknown op ${request.op}`);
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  let reply;
  try {
    reply = { results: answer(JSON.parse(line, revive)) };
  } catch (error) {
    reply = { error: String(error) };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
}
