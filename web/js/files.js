// The trainer files a run already has — Axolotl, LLaMA-Factory, TRL / transformers, torchtune, verl
// (a config or a launch script), DeepSpeed and Accelerate YAML or JSON, a PEFT adapter_config.json,
// a model config.json — dropped, picked or
// pasted. The core reads them (trainmem.inputs.read_texts, through the bridge's read_files); this
// module only gathers the texts, refuses what is not a text file before Python sees it, and shows
// the core's key report: which keys were modelled, which are memory-neutral, which are not modelled.
//
// Files accumulate: a trainer file that names a ds_config.json reads once that file is added too.

import { el } from "./dom.js";
import { formatCount } from "./format.js";

/** The core's limits (trainmem.files.MAX_FILE_BYTES, trainmem.inputs.MAX_FILES): refused here without reading. */
export const MAX_FILE_BYTES = 4 * 2 ** 20;
export const MAX_FILES = 16;

const STATUS_ORDER = ["not modelled", "modelled", "memory-neutral"];
const STATUS_LABELS = { modelled: "modelled", "memory-neutral": "memory-neutral", "not modelled": "not modelled" };
const KEPT_LABELS = {
  gpu: "the GPU model",
  headroom_fraction: "the headroom",
  parallelism: "the number of GPUs",
  model: "the model",
  micro_batch_size: "the micro-batch size",
  gradient_accumulation_steps: "the accumulation steps",
  precision: "the precision",
};

/**
 * The text of a dropped or picked file, or a one-line error: too large, UTF-16, binary, not UTF-8.
 * @returns {Promise<{text: string} | {error: string}>}
 */
export async function fileText(file) {
  const name = file.name || "file";
  if (file.size > MAX_FILE_BYTES) {
    return { error: `${name}: ${formatCount(file.size)} bytes is more than the ${MAX_FILE_BYTES / 2 ** 20} MiB limit of a trainer file` };
  }
  return decodeText(name, new Uint8Array(await file.arrayBuffer()));
}

/** UTF-8 text of a file's bytes (a UTF-8 byte-order mark dropped), or a one-line error. */
export function decodeText(name, bytes) {
  if ((bytes[0] === 0xff && bytes[1] === 0xfe) || (bytes[0] === 0xfe && bytes[1] === 0xff)) {
    return { error: `${name}: UTF-16 text; save the file as UTF-8` };
  }
  if (bytes.includes(0)) return { error: `${name}: a binary file (it holds NUL bytes), not a YAML or JSON text` };
  try {
    return { text: new TextDecoder("utf-8", { fatal: true }).decode(bytes) };
  } catch {
    return { error: `${name}: not UTF-8 text (a binary file?), not a YAML or JSON text` };
  }
}

export class TrainerFiles {
  /**
   * @param {HTMLElement} root  the panel (index.html's #trainer-files)
   * @param {object} options  {engine, formSetup(): the form's full setup, onRead(answer): apply the setup}
   */
  constructor(root, { engine, formSetup, onRead }) {
    this.root = root;
    this.doc = root.ownerDocument;
    this.engine = engine;
    this.formSetup = formSetup;
    this.onRead = onRead;
    this.files = new Map(); // name -> text, in the order given
    this.error = root.querySelector('[data-testid="files-error"]');
    this.report = root.querySelector('[data-testid="files-report"]');
    this.clearButton = root.querySelector('[data-testid="files-clear"]');
    this.input = root.querySelector('[data-testid="files-input"]');
    this.pasteName = root.querySelector('[data-testid="files-paste-name"]');
    this.pasteText = root.querySelector('[data-testid="files-paste-text"]');
    this.reading = null;

    root.querySelector('[data-testid="files-pick"]').addEventListener("click", () => this.input.click());
    this.input.addEventListener("change", () => {
      this.add([...this.input.files]);
      this.input.value = "";
    });
    root.querySelector('[data-testid="files-paste-read"]').addEventListener("click", () => this.addPasted());
    this.clearButton.addEventListener("click", () => this.clear());
  }

  /** Add dropped or picked files (File objects) and read the whole set. */
  async add(fileList) {
    if (!fileList.length) return;
    const names = new Set([...this.files.keys(), ...fileList.map((file) => file.name)]);
    if (names.size > MAX_FILES) return this.showError(`${names.size} files: at most ${MAX_FILES} are read at once`);
    const texts = [];
    for (const file of fileList) {
      const answer = await fileText(file);
      if (answer.error) return this.showError(answer.error); // nothing of this drop is kept
      texts.push([file.name || "file", answer.text]);
    }
    return this.readWith(texts);
  }

  /** Add the pasted text under the name typed next to it. */
  addPasted() {
    const name = (this.pasteName.value || "").trim() || "pasted.yaml";
    const text = this.pasteText.value;
    if (!text.trim()) return this.showError(`${name}: the pasted text is empty`);
    if (new Blob([text]).size > MAX_FILE_BYTES) return this.showError(`${name}: more than the ${MAX_FILE_BYTES / 2 ** 20} MiB limit of a trainer file`);
    return this.readWith([[name, text]]);
  }

  /** Read the kept files plus `added` ([name, text] pairs); keep them only when the set reads. */
  async readWith(added) {
    const next = new Map(this.files);
    for (const [name, text] of added) next.set(name, text);
    this.root.setAttribute("aria-busy", "true");
    const asked = (this.reading = Symbol("read"));
    const answer = await this.engine.readFiles(Object.fromEntries(next), this.formSetup());
    if (asked !== this.reading) return; // a newer drop is being read
    this.root.setAttribute("aria-busy", "false");
    // Which files the panel last answered for (tests wait on it).
    this.root.dataset.read = JSON.stringify([...next.keys()]);
    if (!answer.ok) {
      // A linked file still missing keeps the set, so that the next drop can complete it.
      const missing = answer.errors.some((error) => / names '.*'; add that file too$/.test(error.message));
      if (missing) this.files = next;
      this.clearButton.hidden = !this.files.size;
      return this.showError(answer.errors.map((error) => error.message).join(" "));
    }
    this.files = next;
    this.clearButton.hidden = false;
    this.showError("");
    this.renderReport(answer);
    this.onRead(answer);
  }

  clear() {
    this.files = new Map();
    this.report.hidden = true;
    this.report.replaceChildren();
    this.clearButton.hidden = true;
    this.showError("");
    delete this.root.dataset.read;
  }

  showError(message) {
    this.error.hidden = !message;
    this.error.textContent = message;
    if (message) this.root.setAttribute("aria-busy", "false");
  }

  // ------------------------------------------------------------------ the key report

  renderReport(answer) {
    const doc = this.doc;
    const { files, entries, notes } = answer.keys;
    const counts = Object.fromEntries(STATUS_ORDER.map((status) => [status, entries.filter((e) => e.status === status).length]));
    const read = el(doc, "ul", { class: "files-read", "data-testid": "files-read" });
    for (const file of files) {
      const how = [file.framework, file.linked_from ? `named by ${file.linked_from}` : null].filter(Boolean).join(", ");
      read.append(el(doc, "li", { "data-kind": file.kind }, [el(doc, "strong", { text: file.name }), doc.createTextNode(` — ${file.kind} (${how})`)]));
    }
    const summary = el(doc, "p", {
      class: "files-counts",
      "data-testid": "files-counts",
      text: STATUS_ORDER.map((status) => `${counts[status]} ${STATUS_LABELS[status]}`).join(" · ") + " keys",
    });
    const kept = answer.kept_from_form.map((field) => KEPT_LABELS[field] || field);
    const mode = el(doc, "p", {
      class: "muted",
      "data-testid": "files-mode",
      text:
        answer.mode === "run"
          ? `The form now shows the run these files describe (defaults as their frameworks set them)${kept.length ? `; kept from the form: ${kept.join(", ")}` : ""}.`
          : `The form keeps its other values; these files set only their own fields${kept.length ? ` (the form's ${kept.join(", ")} filled in for them)` : ""}.`,
    });
    const noteList = notes.length ? el(doc, "ul", { class: "files-notes", "data-testid": "files-notes" }, notes.map((text) => el(doc, "li", { text }))) : null;
    const rows = [...entries].sort((a, b) => STATUS_ORDER.indexOf(a.status) - STATUS_ORDER.indexOf(b.status));
    const table = el(doc, "table", { class: "files-keys", "data-testid": "files-keys" }, [
      el(doc, "caption", { class: "visually-hidden", text: "Every key of the files, and what trainmem made of it" }),
      el(doc, "thead", {}, [
        el(doc, "tr", {}, ["File", "Key", "Value", "Read as", "What trainmem made of it"].map((text) => el(doc, "th", { scope: "col", text }))),
      ]),
      el(
        doc,
        "tbody",
        {},
        rows.map((entry) =>
          el(doc, "tr", { "data-status": entry.status, "data-key": entry.key }, [
            el(doc, "td", { text: entry.file }),
            el(doc, "td", {}, [el(doc, "code", { text: entry.key })]),
            el(doc, "td", { text: entry.default ? "(not in the file)" : shortValue(entry.value) }),
            el(doc, "td", { class: `status ${entry.status.replace(" ", "-")}`, text: STATUS_LABELS[entry.status] }),
            el(doc, "td", { text: entry.detail }),
          ]),
        ),
      ),
    ]);
    const details = el(doc, "details", { class: "files-table", open: counts["not modelled"] > 0 && entries.length <= 40 }, [
      el(doc, "summary", { text: `Every key (${entries.length})` }),
      el(doc, "div", { class: "table-scroll" }, [table]),
    ]);
    this.report.replaceChildren(read, summary, mode, noteList || "", details);
    this.report.hidden = false;
  }
}

/** A file's value in one short line. */
function shortValue(value) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  if (text === undefined) return "";
  return text.length > 80 ? `${text.slice(0, 77)}…` : text;
}
