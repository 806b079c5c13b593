// The schema-driven form (web/js/form.js) on a synthetic JSON Schema shaped like pydantic's: a
// discriminated union, an optional union, optional nested objects, plain nested objects. Fields
// that other helpers add to the Setup in these shapes must appear without page changes.
// Run by tests/test_web_form_schema.py:  node tests/js/form_schema.mjs [SETUP_SCHEMA.json]

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const { parseHTML } = await import(new URL("../../web/node_modules/linkedom/esm/index.js", import.meta.url));
const { SetupForm, compositeShape } = await import(new URL("../../web/js/form.js", import.meta.url));

const SCHEMA = {
  $defs: {
    SFT: { type: "object", title: "SFT", properties: { kind: { const: "sft", type: "string", default: "sft" }, packing: { type: "boolean", default: false } } },
    DPO: {
      type: "object",
      title: "DPO",
      properties: {
        kind: { const: "dpo", type: "string", default: "dpo" },
        beta: { type: "number", default: 0.1 },
        reference_model: { anyOf: [{ $ref: "#/$defs/Reference" }, { type: "null" }], default: null },
      },
    },
    Reference: {
      type: "object",
      properties: { precision: { enum: ["bf16", "fp32"], type: "string", default: "bf16" }, offload: { type: "boolean", default: false } },
    },
    Classifier: { type: "object", properties: { type: { enum: ["classifier"], type: "string" }, num_labels: { type: "integer", default: 2 } } },
    Regression: { type: "object", properties: { type: { enum: ["regression"], type: "string" }, num_labels: { type: "integer", default: 1 } } },
    Images: {
      type: "object",
      properties: {
        num_images: { type: "integer", default: 1 },
        image_size: { type: "integer", default: 448 },
        encoder: { type: "object", properties: { patch: { type: "integer", default: 14 } } },
      },
    },
  },
  type: "object",
  properties: {
    micro_batch_size: { type: "integer", default: 1 },
    training: {
      oneOf: [{ $ref: "#/$defs/SFT" }, { $ref: "#/$defs/DPO" }],
      discriminator: { propertyName: "kind", mapping: { sft: "#/$defs/SFT", dpo: "#/$defs/DPO" } },
      default: { kind: "sft", packing: false },
    },
    head: {
      anyOf: [{ oneOf: [{ $ref: "#/$defs/Classifier" }, { $ref: "#/$defs/Regression" }], discriminator: { propertyName: "type" } }, { type: "null" }],
      default: null,
    },
    images: { anyOf: [{ $ref: "#/$defs/Images" }, { type: "null" }], default: null },
  },
};

const CATALOGS = { presets: [], gpus: [], optimizers: [] };

function makeForm(schema, defaults) {
  const { document, Event } = parseHTML("<!doctype html><html><body><form></form></body></html>");
  const changes = [];
  const form = new SetupForm(document.querySelector("form"), { schema, catalogs: CATALOGS, defaults, onChange: (setup) => changes.push(setup) });
  form.build();
  form.setSetup(defaults);
  const input = (path) => document.querySelector(`[data-testid="input-${path}"]`);
  const choose = (path, value) => {
    const select = input(path);
    for (const option of select.querySelectorAll("option")) {
      if (option.getAttribute("value") === value) option.setAttribute("selected", "");
      else option.removeAttribute("selected");
    }
    select.dispatchEvent(new Event("change", { bubbles: true }));
  };
  const hidden = (node) => {
    for (let n = node; n; n = n.parentElement) if (n.hasAttribute && n.hasAttribute("hidden")) return true;
    return false;
  };
  return { document, form, input, choose, hidden, changes };
}

// ---------------------------------------------------------------------------- shapes

assert.deepEqual(compositeShape(SCHEMA.properties.training, SCHEMA).kind, "union");
assert.deepEqual(compositeShape(SCHEMA.properties.training, SCHEMA).key, "kind");
assert.deepEqual(compositeShape(SCHEMA.properties.head, SCHEMA).branches.map((b) => b.value), ["classifier", "regression"]);
assert.equal(compositeShape(SCHEMA.properties.head, SCHEMA).nullable, true);
assert.equal(compositeShape(SCHEMA.properties.images, SCHEMA).kind, "optional");
assert.equal(compositeShape({ anyOf: [{ type: "string" }, { type: "null" }] }, SCHEMA), null);
assert.equal(compositeShape({ type: "integer" }, SCHEMA), null);

// ---------------------------------------------------------------------------- the form

const defaults = { micro_batch_size: 1, training: { kind: "sft", packing: false }, head: null, images: null };
const page = makeForm(SCHEMA, defaults);
const { input, choose, form, hidden } = page;
for (const path of ["training", "training.packing", "training.beta", "training.reference_model", "training.reference_model.precision",
  "training.reference_model.offload", "head", "head.num_labels@classifier", "head.num_labels@regression", "images", "images.num_images",
  "images.image_size", "images.encoder.patch"]) {
  assert.ok(input(path), `an input for ${path}`);
}
assert.deepEqual([...input("training").querySelectorAll("option")].map((o) => o.getAttribute("value")), ["sft", "dpo"]);
assert.deepEqual([...input("head").querySelectorAll("option")].map((o) => o.getAttribute("value")), ["", "classifier", "regression"]);
assert.deepEqual(form.getSetup(), defaults, "the defaults read back unchanged");
assert.ok(hidden(input("training.beta")) && !hidden(input("training.packing")), "only the chosen branch shows");
assert.ok(hidden(input("images.num_images")), "an unset optional object shows no fields");

// A setup from a link: every shape written and read back exactly, defaults filled in.
form.setSetup({
  micro_batch_size: 2,
  training: { kind: "dpo", beta: 0.2, reference_model: { precision: "fp32" } },
  head: { type: "regression", num_labels: 3 },
  images: { num_images: 4 },
});
assert.deepEqual(form.getSetup(), {
  micro_batch_size: 2,
  training: { kind: "dpo", beta: 0.2, reference_model: { precision: "fp32", offload: false } },
  head: { type: "regression", num_labels: 3 },
  images: { num_images: 4, image_size: 448, encoder: { patch: 14 } },
});
assert.ok(!hidden(input("training.reference_model.precision")) && hidden(input("training.packing")));

// The reader switches branches with the select; the form reports the change.
choose("training", "sft");
assert.deepEqual(page.changes.at(-1).training, { kind: "sft", packing: false });
choose("images", "");
assert.equal(page.changes.at(-1).images, null);
choose("head", "classifier");
assert.deepEqual(page.changes.at(-1).head, { type: "classifier", num_labels: 2 });

// A value no branch matches is kept whole for the core to name, not turned into a branch.
form.setSetup({ ...defaults, training: { kind: "ppo", clip: 0.2 }, images: "many" });
assert.deepEqual(form.getSetup().training, { kind: "ppo", clip: 0.2 });
assert.equal(form.getSetup().images, "many");

// ---------------------------------------------------------------------------- the real Setup schema

const setupSchemaPath = process.argv[2];
if (setupSchemaPath) {
  const { schema, defaults: coreDefaults, catalogs } = JSON.parse(readFileSync(setupSchemaPath, "utf8"));
  const { document } = parseHTML("<!doctype html><html><body><form></form></body></html>");
  const real = new SetupForm(document.querySelector("form"), { schema, catalogs, defaults: coreDefaults });
  real.build();
  real.setSetup(coreDefaults);
  assert.deepEqual(real.getSetup(), coreDefaults, "the core's defaults read back unchanged through the real form");
}
console.log("form_schema: ok");
