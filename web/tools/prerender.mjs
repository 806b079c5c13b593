// Build-time pre-render (run by build_site.py): fills the results of the default setup, and
// the form, into _site/index.html and _site/embed.html with the page's own code (js/results.js,
// js/form.js) on a server-side DOM, so that the first paint shows a real breakdown before
// Pyodide loads and nothing moves when the page's scripts take over.
//
//   node web/tools/prerender.mjs _site

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseHTML } from "linkedom";
import { SetupForm } from "../js/form.js";
import { renderReport, renderSummary, summarize } from "../js/results.js";
import { minimalSetup, overlay } from "../js/setup.js";
import { describeSetup } from "../js/status.js";

const site = process.argv[2];
if (!site) {
  console.error("usage: node prerender.mjs SITE_DIR");
  process.exit(2);
}

/** JSON that is safe inside <script type="application/json">: no "</script>" can appear. */
function scriptJson(value) {
  return JSON.stringify(value).replaceAll("<", "\\u003c");
}

function prerender(page, shape) {
  const file = join(site, page);
  const { document } = parseHTML(readFileSync(file, "utf8"));
  const dataNode = document.getElementById("app-data");
  const data = JSON.parse(dataNode.textContent);
  shape(document, data);
  dataNode.textContent = scriptJson(data);
  writeFileSync(file, document.toString());
}

prerender("index.html", (document, data) => {
  renderReport(document.getElementById("results"), data.default_report, { catalogs: data.catalogs });
  // The form too, so that nothing moves when main.js builds the live one in its place.
  const setup = overlay(data.core_defaults, data.default_setup, data.schema);
  const form = new SetupForm(document.getElementById("setup-form"), {
    schema: data.schema,
    catalogs: data.catalogs,
    defaults: setup,
    modelInputs: data.default_model_inputs,
  });
  form.build();
  form.setSetup(setup);
  const minimal = minimalSetup(setup, data.core_defaults, data.schema);
  document.querySelector('[data-testid="setup-json"]').textContent = JSON.stringify(minimal, null, 2);
});

prerender("embed.html", (document, data) => {
  const setup = overlay(data.core_defaults, data.default_setup, data.schema);
  data.default_summary = summarize(data.default_report);
  delete data.default_report;
  for (const preset of data.catalogs.presets) delete preset.config; // the embed never edits a config.json
  renderSummary(document.getElementById("results"), data.default_summary, describeSetup(setup, data.catalogs));
});
