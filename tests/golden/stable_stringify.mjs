// The JavaScript reference for domain/hashing.py: what a TypeScript client computes.
//
// stableStringify is JSON.stringify with every object's keys sorted by UTF-16 code units
// (Array.prototype.sort's default order). Keys and leaves are written by JSON.stringify itself;
// only the walk over objects and arrays is ours. The walk cannot be left to JSON.stringify with a
// key-sorting replacer: JavaScript always enumerates integer-like keys ("0", "9", "10") first and
// in numeric order, whatever order they were inserted in, so that text would not be sorted.
import { createHash } from "node:crypto";

export function stableStringify(value) {
  if (Array.isArray(value)) {
    const items = [];
    // An index loop, not map(): holes and undefined both become null, as in JSON.stringify.
    for (let i = 0; i < value.length; i++) {
      const text = stableStringify(value[i]);
      items.push(text === undefined ? "null" : text);
    }
    return "[" + items.join(",") + "]";
  }
  if (value !== null && typeof value === "object") {
    const parts = [];
    for (const key of Object.keys(value).sort()) {
      const text = stableStringify(value[key]);
      if (text !== undefined) parts.push(JSON.stringify(key) + ":" + text);
    }
    return "{" + parts.join(",") + "}";
  }
  return JSON.stringify(value); // undefined for undefined: the key is left out
}

// SHA-256 of the UTF-8 bytes of a string, lowercase hex. Node encodes a lone surrogate as U+FFFD.
export function sha256Hex(text) {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

export function sha256Bytes(bytes) {
  return createHash("sha256").update(bytes).digest("hex");
}
