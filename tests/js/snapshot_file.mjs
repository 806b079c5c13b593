// The snapshot file's pure parts (web/js/snapshot.js): packSnapshot / unpackSnapshot round trip, the
// alignment Pyodide needs, every damage to the head refused, and libraryMismatch's checks.
import assert from "node:assert/strict";
import { libraryMismatch, packSnapshot, SNAPSHOT_FORMAT, unpackSnapshot } from "../../web/js/snapshot.js";

const libraries = [{ path: "/lib/python3.14/site-packages/pydantic_core/_pydantic_core.so", heap_base: 12345680, heap_start: 15000000, table_base: 6001, handles: [2] }];
const memory = new Uint8Array(4096).map((_, i) => (i * 7) % 251);
const whole = (parts) => new Uint8Array(Buffer.concat(parts.map((p) => Buffer.from(p))));

for (const name of ["", "é", "a".repeat(37)]) { // every padding length, and a multi-byte character
  const bytes = whole(packSnapshot({ libraries: [{ ...libraries[0], path: libraries[0].path + name }], memory_bytes: 4096 }, memory));
  const unpacked = unpackSnapshot(bytes);
  assert.ok(unpacked, `unpacks (${name})`);
  assert.equal(unpacked.manifest.format, SNAPSHOT_FORMAT);
  assert.equal(unpacked.manifest.libraries[0].path, libraries[0].path + name);
  assert.equal(unpacked.snapshot.byteOffset % 16, 0);
  assert.deepEqual(unpacked.snapshot, memory);
}

const good = whole(packSnapshot({ libraries, memory_bytes: 4096 }, memory));
const damaged = {
  empty: new Uint8Array(0),
  zeroed_head: (() => { const b = good.slice(); b.fill(0, 0, 64); return b; })(),
  truncated: good.slice(0, 40),
  length_too_long: (() => { const b = good.slice(); new DataView(b.buffer).setUint32(0, 1 << 30, true); return b; })(),
  not_json: (() => { const b = good.slice(); b[4] = 0x7b; b[5] = 0x7b; return b; })(),
  other_format: whole(packSnapshot({ libraries, memory_bytes: 4096, format: "trainmem-python-started" }, memory)),
  no_libraries: whole(packSnapshot({ memory_bytes: 4096 }, memory)),
  no_memory_size: whole(packSnapshot({ libraries }, memory)),
  not_bytes: "a string",
};
for (const [name, bytes] of Object.entries(damaged)) assert.equal(unpackSnapshot(bytes), null, name);

const { manifest } = unpackSnapshot(good);
const loaded = libraries.map(({ handles, ...where }) => where);
assert.equal(libraryMismatch(manifest, loaded), null);
for (const field of ["path", "heap_base", "heap_start", "table_base"]) {
  const moved = [{ ...loaded[0], [field]: field === "path" ? "/elsewhere.so" : loaded[0][field] + 16 }];
  assert.match(libraryMismatch(manifest, moved), new RegExp(field));
}
assert.match(libraryMismatch(manifest, []), /0 libraries loaded/);
assert.match(libraryMismatch({ libraries: [{ ...libraries[0], handles: [0] }] }, loaded), /handles/);
assert.match(libraryMismatch({ libraries: [{ ...libraries[0], handles: "2" }] }, loaded), /handles/);
console.log("snapshot_file: ok");
