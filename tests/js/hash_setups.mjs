// The page's share-link reader (web/js/setup.js decodeHash, then main.js's fullSetup: the core's
// defaults overlaid with the hash's fields and the form's couplings applied) on a list of hashes.
// Run by tests/test_hostile_flags_hash.py:  node tests/js/hash_setups.mjs INPUT.json
// INPUT.json: {"schema": Setup's JSON Schema, "defaults": a full default setup, "hashes": ["#...", ...]}
// Prints one JSON line per hash: {"hash": ..., "setup": the setup the page would compute, or null}.

import { readFileSync } from "node:fs";

const { decodeHash, overlay, flatten } = await import(new URL("../../web/js/setup.js", import.meta.url));
const { applyCouplings } = await import(new URL("../../web/js/hints.js", import.meta.url));

const input = JSON.parse(readFileSync(process.argv[2], "utf8"));
for (const hash of input.hashes) {
  const { setup: partial } = decodeHash(hash);
  let setup = null;
  if (partial) {
    const paths = flatten(partial, input.schema).map(([path]) => path);
    setup = applyCouplings(overlay(input.defaults, partial, input.schema), paths);
  }
  process.stdout.write(`${JSON.stringify({ hash, setup })}\n`);
}
