// Generates tests/golden/hash_vectors.json: golden vectors for domain/hashing.py, computed by
// JavaScript (see stable_stringify.mjs) so that the Python rules are pinned to what a TypeScript
// client computes.
//
// The vectors are generated once and committed; the tests only read the JSON. To regenerate
// (after adding a vector, never to make a failing test pass), from the repository root:
//
//     node tests/golden/make_hash_vectors.mjs
//
// and review the diff of hash_vectors.json: an existing expected value must never change.
//
// JSON cannot carry every value the vectors need, so inputs use three one-key tags, decoded by
// tests/test_hashing.py:
//   {"$absent": true}   JavaScript undefined; Python's hashing.ABSENT
//   {"$float": "text"}  a number Python must receive as a float: -0, NaN, Infinity, integral
//                       doubles beyond 2**53, and values such as 2.0 that Python holds as floats
//   {"$int": "digits"}  an integer beyond 2**53 that Python holds as an int and that is exactly
//                       a double, so JavaScript holds the same number
// Every other JSON number is read by Python as usual: an int without a fraction or exponent,
// otherwise a float.
import { writeFileSync } from "node:fs";
import { sha256Bytes, sha256Hex, stableStringify } from "./stable_stringify.mjs";

class PyFloat {
  constructor(value) {
    this.value = value;
  }
}
class PyInt {
  constructor(digits) {
    this.digits = digits;
  }
}
const F = (value) => new PyFloat(value);
const I = (bigint) => new PyInt(String(bigint));

const numberText = (x) => (Object.is(x, -0) ? "-0" : String(x));

// The plain JavaScript value a TypeScript client would hold.
function toJs(value) {
  if (value instanceof PyFloat) return value.value;
  if (value instanceof PyInt) return Number(value.digits);
  if (Array.isArray(value)) return value.map(toJs);
  if (value !== null && typeof value === "object") {
    const out = {};
    for (const key of Object.keys(value)) {
      Object.defineProperty(out, key, { value: toJs(value[key]), enumerable: true });
    }
    return out;
  }
  return value;
}

// The tagged JSON form that tells Python which value to build.
function encode(value) {
  if (value === undefined) return { $absent: true };
  if (value instanceof PyFloat) return { $float: numberText(value.value) };
  if (value instanceof PyInt) {
    if (BigInt(Number(value.digits)) !== BigInt(value.digits)) {
      throw new Error(`${value.digits} is not exactly a double`);
    }
    return { $int: value.digits };
  }
  if (typeof value === "number") {
    const plain =
      Number.isFinite(value) &&
      !Object.is(value, -0) &&
      (!Number.isInteger(value) || Number.isSafeInteger(value));
    return plain ? value : { $float: numberText(value) };
  }
  if (Array.isArray(value)) return value.map(encode);
  if (value !== null && typeof value === "object") {
    const out = {};
    for (const key of Object.keys(value)) {
      Object.defineProperty(out, key, { value: encode(value[key]), enumerable: true });
    }
    return out;
  }
  return value;
}

// Builds an object in exactly this key order (and with "__proto__" as an own key, as JSON.parse
// would); the order only matters for the Python input, the text is sorted either way.
function obj(...pairs) {
  const out = {};
  for (const [key, value] of pairs) {
    Object.defineProperty(out, key, { value, enumerable: true, writable: true });
  }
  return out;
}

const controls = Array.from({ length: 0x20 }, (_, i) => String.fromCharCode(i)).join("");

const stringifyCases = [
  // Scalars
  ["null", null],
  ["true", true],
  ["false", false],
  ["empty string", ""],
  ["ascii string", "hello world"],
  ["quote and backslash", 'say "hi" \\ back\\slash \\"'],
  ["every C0 control character", controls],
  ["DEL, U+0080, U+2028, U+2029 are not escaped", "\x7f\x80\u2028\u2029"],
  ["slash is not escaped", "a/b</script>"],
  ["non-ASCII BMP", "héllo wörld, 日本語, Ελληνικά, עברית"],
  ["combining sequence stays decomposed", "e\u0301 vs \u00e9"],
  ["astral characters", "😀 𝄞 🇫🇷 \u{10000} \u{10FFFF}"],
  ["lone high surrogate", "\ud800"],
  ["lone low surrogate", "\udfff"],
  ["lone high surrogate at start", "\udbffabc"],
  ["lone high surrogate at end", "abc\ud83d"],
  ["lone low surrogate at start", "\ude00abc"],
  ["lone low surrogate at end", "abc\udc00"],
  ["low before high is two lone surrogates", "\ude00\ud83d"],
  ["lone surrogate next to a pair", "\ud83d\ud83d\ude00\ude00"],
  ["private use area", "\ue000\uf8ff\ufffd\uffff"],
  // Numbers
  ["zero", 0],
  ["negative zero", -0],
  ["float 0.0", F(0)],
  ["float 2.0 is 2", F(2)],
  ["float -2.0 is -2", F(-2)],
  ["integer 42", 42],
  ["negative integer", -7],
  ["0.1 + 0.2", 0.1 + 0.2],
  ["one third", 1 / 3],
  ["0.5", 0.5],
  ["-1.5", -1.5],
  ["1e-6 is written in full", 1e-6],
  ["1.5e-6", 1.5e-6],
  ["1e-7 switches to exponent form", 1e-7],
  ["1.5e-7", 1.5e-7],
  ["0.0001 (Python repr uses an exponent below 1e-4)", 0.0001],
  ["0.00001234", 0.00001234],
  ["123e-20", 123e-20],
  ["1e16 as a float", F(1e16)],
  ["1e20", 1e20],
  ["1e20 as a float", F(1e20)],
  ["123456789012345680000", 123456789012345680000],
  ["largest double below 1e21", 999999999999999900000],
  ["1e21", 1e21],
  ["1.5e21", 1.5e21],
  ["1e22 as an exact int", I(10n ** 22n)],
  ["2**53 - 1", 2 ** 53 - 1],
  ["2**53", 2 ** 53],
  ["-(2**53)", -(2 ** 53)],
  ["2**53 + 2 as an exact int", I(2n ** 53n + 2n)],
  ["2**60 as an exact int", I(2n ** 60n)],
  ["2**60 as a float", F(2 ** 60)],
  ["smallest subnormal", 5e-324],
  ["largest double", 1.7976931348623157e308],
  ["smallest normal", 2.2250738585072014e-308],
  ["negative large", -1.5e300],
  ["NaN is null", F(NaN)],
  ["Infinity is null", F(Infinity)],
  ["-Infinity is null", F(-Infinity)],
  ["numbers in an array", [F(2), 1e21, 1e-7, 1e-6, -0, 0.1 + 0.2, 5e-324, 1e20, F(NaN)]],
  // Structures
  ["empty object", {}],
  ["empty array", []],
  ["nested empty", [[], {}, [[]], { a: {} }]],
  ["nested arrays", [1, [2, [3, [4, []]]]]],
  [
    "nested objects",
    obj(["z", obj(["y", obj(["x", [1, obj(["w", null], ["v", true])]])])], ["a", "first"]),
  ],
  ["array of mixed values", [null, true, false, 0, "", "s", [], {}]],
  // Key order
  ["keys sorted", obj(["b", 1], ["a", 2], ["c", 3])],
  ["upper case before lower case", obj(["b", 1], ["B", 2], ["a", 3], ["A", 4], ["_", 5])],
  ["empty key first, prefixes before extensions", obj(["ab", 1], ["a", 2], ["", 3], ["a\0", 4])],
  [
    "integer-like keys sort as text",
    obj(["a", 0], ["10", 1], ["9", 2], ["1", 3], ["01", 4], ["-1", 5], ["1.5", 6], ["2", 7]),
  ],
  [
    "astral keys sort before U+E000-U+FFFF (UTF-16 order, not code point order)",
    obj(
      ["\uffff", 1],
      ["\ue000", 2],
      ["\u{1F600}", 3],
      ["\u{10000}", 4],
      ["\uff21", 5],
      ["z", 6],
      ["é", 7],
      ["\u{10FFFF}", 8],
      ["\ud7ff", 9],
    ),
  ],
  [
    "keys with lone surrogates",
    obj(["\ue000", 1], ["\udc00", 2], ["\u{10000}", 3], ["\ud800", 4], ["\ud7ff", 5]),
  ],
  [
    "keys needing escapes",
    obj(['q"uote', 1], ["back\\slash", 2], ["new\nline", 3], ["\0", 4], ["\x1f", 5]),
  ],
  ["non-ASCII keys", obj(["日本", 1], ["ü", 2], ["u", 3], ["ı", 4])],
  ["__proto__ as an own key", obj(["__proto__", 1], ["a", 2])],
  ["sorted at every depth", obj(["b", [obj(["d", 1], ["c", 2])]], ["a", obj(["f", 3], ["e", 4])])],
  // Absent values (JavaScript undefined)
  ["absent value in an object is omitted", obj(["b", 1], ["a", undefined], ["c", null])],
  ["object whose values are all absent", obj(["a", undefined], ["b", undefined])],
  ["absent value in an array is null", [undefined, 1, undefined]],
  ["absent deep inside", obj(["x", obj(["y", undefined], ["z", [undefined]])])],
  // Floats inside tool args
  [
    "tool args with floats",
    obj(
      ["path", "/srv/data/report.csv"],
      ["limit", F(2)],
      ["offset", 0.5],
      ["threshold", 1e-7],
      ["scale", 1e21],
      ["weights", [0.1, 0.2, 0.1 + 0.2, -0, F(100)]],
      ["nested", obj(["tiny", 5e-324], ["huge", 1.7976931348623157e308], ["big", 1e20])],
    ),
  ],
];

const stringify = stringifyCases.map(([name, value]) => {
  const text = stableStringify(toJs(value));
  return { name, input: encode(value), text, sha256: sha256Hex(text) };
});

// identity_hash: {type, source} for sourced objects, {type, "xt/id"} for unsourced ones.
const identityCases = [
  [
    "file on a filesystem",
    "file",
    obj(["type", "filesystem"], ["filesystemId", "a1b2c3d4"], ["path", "/home/abaris/project/src/main.ts"]),
    undefined,
  ],
  [
    "file with a non-ASCII path, keys given in another order",
    "file",
    obj(["path", "/home/zoë/日本/😀 notes.md"], ["filesystemId", "fs-9"], ["type", "filesystem"]),
    undefined,
  ],
  ["toolcall", "toolcall", undefined, "toolu_01A2B3C4"],
  ["chat", "chat", undefined, "chat:session-1"],
  ["system prompt", "system_prompt", undefined, "system_prompt:session-1"],
  ["session", "session", undefined, "session:session-1"],
  ["unsourced id with non-ASCII", "toolcall", undefined, "call_ü😀"],
];
const identity_hash = identityCases.map(([name, type, source, xtId]) => {
  const fields = source !== undefined ? { type, source } : { type, "xt/id": xtId };
  const text = stableStringify(fields);
  const vector = { name, type };
  if (source !== undefined) vector.source = source;
  else vector.xt_id = xtId;
  return { ...vector, text, sha256: sha256Hex(text) };
});

// content_hash: SHA-256 of the content's UTF-8 bytes, null for null content.
const contentCases = [
  ["empty", ""],
  ["ascii with newline", "hello\n"],
  ["CRLF is hashed as is", "a\r\nb\r\n"],
  ["non-ASCII and astral", "héllo 日本 😀\n"],
  ["lone surrogate is hashed as U+FFFD", "a\ud800b"],
  ["null content", null],
];
const content_hash = contentCases.map(([name, content]) => ({
  name,
  content,
  sha256: content === null ? null : sha256Hex(content),
}));

// file_hash: SHA-256 of the raw bytes on disk.
const fileCases = [
  ["empty file", Buffer.alloc(0)],
  ["UTF-8 text (equals content_hash of the text)", Buffer.from("héllo 日本 😀\n", "utf8")],
  ["latin-1 bytes, not UTF-8", Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a])],
  ["arbitrary binary", Buffer.from([0xff, 0xfe, 0x00, 0x80, 0xc3, 0x28, 0xed, 0xa0, 0x80])],
];
const file_hash = fileCases.map(([name, bytes]) => ({
  name,
  hex: bytes.toString("hex"),
  sha256: sha256Bytes(bytes),
}));

// metadata_hash: the type-specific fields of §2.6, nothing else.
const metadataCases = [
  ["file", obj(["file_type", "ts"], ["char_count", 1234])],
  ["discovery stub", obj(["file_type", "md"], ["char_count", 0])],
  ["file without extension, astral content", obj(["file_type", ""], ["char_count", 2])],
  [
    "toolcall, optional fields absent",
    obj(
      ["tool", "read"],
      ["args", obj(["path", "/srv/app/main.py"], ["offset", 0.5], ["limit", F(200)])],
      ["args_display", undefined],
      ["status", "ok"],
      ["chat_ref", "chat:session-1"],
      ["file_refs", undefined],
    ),
  ],
  [
    "toolcall, optional fields left out entirely",
    obj(
      ["tool", "read"],
      ["args", obj(["path", "/srv/app/main.py"], ["offset", 0.5], ["limit", F(200)])],
      ["status", "ok"],
      ["chat_ref", "chat:session-1"],
    ),
  ],
  [
    "toolcall, optional fields present",
    obj(
      ["tool", "bash"],
      ["args", obj(["command", "ls -la"], ["timeout", 1.5], ["scale", 1e21], ["eps", 1e-7])],
      ["args_display", "ls -la (1.5s)"],
      ["status", "fail"],
      ["chat_ref", "chat:session-1"],
      ["file_refs", ["3f0a", "09bc", "aa11"]],
    ),
  ],
  [
    "toolcall, empty file_refs is present",
    obj(
      ["tool", "grep"],
      ["args", obj(["pattern", "naïve😀"], ["paths", []])],
      ["status", "ok"],
      ["chat_ref", "chat:session-1"],
      ["file_refs", []],
    ),
  ],
  ["system prompt has no fields", {}],
  [
    "session: sets are arrays in first-encounter order",
    obj(
      ["session_id", "session-1"],
      ["chat_ref", "chat:session-1"],
      ["system_prompt_ref", "system_prompt:session-1"],
      ["session_index", ["id3", "id1", "id2"]],
      ["metadata_pool", ["id3", "id1"]],
      ["active_set", ["id1"]],
      ["pinned_set", []],
    ),
  ],
];
const metadata_hash = metadataCases.map(([name, fields]) => {
  const text = stableStringify(toJs(fields));
  return { name, fields: encode(fields), text, sha256: sha256Hex(text) };
});

// object_hash: {file_hash, content_hash, metadata_hash}.
const h = (s) => sha256Hex(s);
const objectCases = [
  ["unsourced: file_hash absent", undefined, h("output"), h("{}")],
  ["discovery stub: file_hash null, content_hash null", null, null, h("{}")],
  ["read file: every hash set", h("text"), h("text"), h('{"char_count":4,"file_type":"txt"}')],
];
const object_hash = objectCases.map(([name, fileHash, contentHash, metadataHash]) => {
  const text = stableStringify({
    file_hash: fileHash,
    content_hash: contentHash,
    metadata_hash: metadataHash,
  });
  return {
    name,
    file_hash: encode(fileHash),
    content_hash: contentHash,
    metadata_hash: metadataHash,
    text,
    sha256: sha256Hex(text),
  };
});

// char_count: JavaScript's length, UTF-16 code units; 0 for null.
const charCases = [
  ["empty", ""],
  ["ascii", "abc"],
  ["non-ASCII BMP", "héllo 日本語"],
  ["one astral character is two units", "😀"],
  ["astral inside text", "a😀b𝄞c"],
  ["flag is four units", "🇫🇷"],
  ["decomposed accent is two units", "e\u0301"],
  ["lone surrogate is one unit", "a\ud800"],
  ["null content", null],
];
const char_count = charCases.map(([name, content]) => ({
  name,
  content,
  count: content === null ? 0 : content.length,
}));

const vectors = {
  comment:
    "Generated by tests/golden/make_hash_vectors.mjs with Node.js; do not edit by hand. " +
    "Input tags: {\"$absent\": true}, {\"$float\": text}, {\"$int\": digits} (see the script).",
  node: process.version,
  stringify,
  identity_hash,
  content_hash,
  file_hash,
  metadata_hash,
  object_hash,
  char_count,
};

const out = new URL("./hash_vectors.json", import.meta.url);
writeFileSync(out, JSON.stringify(vectors, null, 2) + "\n");
console.log(`wrote ${out.pathname}`);
