// The setup form, generated from the JSON Schema of trainmem.setup.Setup plus hints.js.
//
// Every input carries data-testid="input-<dotted path>". The form reads and writes a *full*
// setup object; it validates nothing itself: the core's messages are shown next to fields.

import { el } from "./dom.js";
import { COUPLINGS, GROUPS, hintFor, isAdvanced, labelFor } from "./hints.js";
import { branches, clone, getPath, isAtomic, isFreeForm, isPlainObject, parseJson, resolve, schemaAt, setPath } from "./setup.js";

const MODEL_MODES = {
  hf_config: "Your config.json…",
  architecture: "Architecture, field by field…",
  num_parameters: "Parameter count only…",
};

/** Choose an option, in a browser and in the server-side DOM of the build-time render alike. */
function setSelectValue(select, value) {
  for (const option of select.querySelectorAll("option")) {
    if (option.getAttribute("value") === value) option.setAttribute("selected", "");
    else option.removeAttribute("selected");
  }
  try {
    select.value = value;
  } catch {
    // linkedom (build time) has no setter: the selected attribute above says it
  }
}

/** The chosen option's value (linkedom answers undefined before anything is chosen). */
function selectValue(select) {
  const value = select.value;
  if (value !== undefined && value !== null) return value;
  const option = select.querySelector("option[selected]") || select.querySelector("option");
  return option ? option.getAttribute("value") : "";
}

function setChecked(input, on) {
  if (on) input.setAttribute("checked", "");
  else input.removeAttribute("checked");
  input.checked = on;
}

function idFor(path) {
  return `f-${path.replaceAll(".", "-")}`;
}

/** The kind of input a leaf schema gets. */
function leafKind(schema, root) {
  const options = branches(schema, root);
  const nonNull = options.filter((branch) => branch.type !== "null");
  const nullable = options.length > nonNull.length;
  const main = nonNull.length === 1 ? nonNull[0] : schema;
  if (main.enum) return { kind: "select", values: main.enum, nullable };
  // A nullable boolean (null: the framework's own default) needs three states: Default, true, false.
  if (main.type === "boolean") return nullable ? { kind: "select", values: [true, false], nullable } : { kind: "checkbox", nullable };
  if (main.type === "integer" || main.type === "number") return { kind: "number", integer: main.type === "integer", nullable, schema: main };
  const isList = (s) => s.type === "array" && (!s.items || s.items.type === "string");
  const constant = nonNull.find((branch) => branch.const !== undefined);
  if (isList(main) || (nonNull.some(isList) && nonNull.every((b) => isList(b) || b.const !== undefined))) {
    return { kind: "list", constant: constant ? constant.const : undefined, nullable };
  }
  if (main.type === "string") return { kind: "text", nullable };
  return { kind: "json", nullable };
}

/** The branches of a union, with unions nested in it (Optional[Annotated[A | B, discriminator]]) laid flat. */
function flatBranches(schema, root, found = { branches: [], discriminator: null }) {
  if (schema.discriminator?.propertyName) found.discriminator = schema.discriminator.propertyName;
  for (const branch of branches(schema, root)) {
    if (branch.anyOf || branch.oneOf) flatBranches(branch, root, found);
    else found.branches.push(branch);
  }
  return found;
}

/** The one value a schema allows (a Literal: const, or an enum of one), or undefined. */
function constOf(schema) {
  if (!schema) return undefined;
  if (schema.const !== undefined) return schema.const;
  return Array.isArray(schema.enum) && schema.enum.length === 1 ? schema.enum[0] : undefined;
}

/**
 * How a union of objects is shown: {kind: "optional", branches: [one], nullable} for an optional
 * object, {kind: "union", key, branches: [{value, schema}], nullable} for a union told apart by a
 * discriminator (the schema's, or a key every branch fixes to its own constant), or null (any other
 * field: a leaf input).
 */
export function compositeShape(schema, root) {
  const { branches: options, discriminator } = flatBranches(schema, root);
  if (!options.length) return null;
  const nonNull = options.filter((branch) => branch.type !== "null");
  const nullable = nonNull.length < options.length;
  const objects = nonNull.filter((branch) => branch.properties && !isFreeForm(branch));
  if (!objects.length || objects.length !== nonNull.length) return null;
  if (objects.length === 1) return nullable ? { kind: "optional", branches: [{ value: null, schema: objects[0] }], nullable } : null;
  const valueOf = (branch, key) => constOf(resolve(branch.properties[key] || {}, root));
  const distinct = (key) => {
    const values = objects.map((branch) => valueOf(branch, key));
    return values.every((value) => value !== undefined) && new Set(values.map(String)).size === values.length;
  };
  const key = discriminator && distinct(discriminator) ? discriminator : Object.keys(objects[0].properties).find(distinct);
  if (!key) return null;
  return { kind: "union", key, branches: objects.map((branch) => ({ value: valueOf(branch, key), schema: branch })), nullable };
}

/** An object of the children's values; unset ones (null, "") are left out, for the core's defaults. */
function readChildren(children) {
  const value = {};
  for (const child of children) {
    const item = child.control.read();
    if (item === null || item === "" || item === undefined) continue;
    value[child.key] = item;
  }
  return value;
}

function writeChildren(children, value) {
  for (const child of children) {
    const item = isPlainObject(value) && child.key in value ? value[child.key] : child.schema.default;
    child.control.write(item === undefined ? null : item);
  }
}

/** Whether an input of this kind can show a value exactly (and read it back unchanged). */
function holds(spec, value) {
  if (value === undefined) return true;
  if (value === null) return spec.nullable;
  switch (spec.kind) {
    case "checkbox":
      return typeof value === "boolean";
    case "number":
      return typeof value === "number" && Number.isFinite(value) && (!spec.integer || Number.isInteger(value));
    case "list":
      return value === spec.constant || (Array.isArray(value) && value.every((item) => typeof item === "string" && !item.includes(",")));
    case "text":
      return typeof value === "string";
    default:
      return true;
  }
}

/**
 * A value from a link (or a trainer file) that an input cannot hold — the text "false" for a
 * checkbox, an object for a number — is kept as it is until the reader edits that input, so
 * the core names it next to the field instead of the form silently turning it into another value.
 */
function keepForeignValues(input, spec, read, write) {
  let foreign = null; // {value} while the input stands for a value it cannot show
  const forget = () => {
    foreign = null;
    input.removeAttribute("data-foreign");
  };
  input.addEventListener("input", forget);
  input.addEventListener("change", forget);
  return {
    read: () => (foreign ? foreign.value : read()),
    write: (value) => {
      if (holds(spec, value)) {
        forget();
        write(value);
        return;
      }
      foreign = { value };
      input.setAttribute("data-foreign", typeof value === "string" ? value : JSON.stringify(value) ?? String(value));
      if (spec.kind === "checkbox") write(false);
      else if (spec.kind === "number") write(null);
      else write(typeof value === "string" ? value : JSON.stringify(value) ?? "");
    },
  };
}

export class SetupForm {
  /**
   * @param {HTMLElement} container  where the form goes
   * @param {object} options  {schema, catalogs, defaults, onChange(setup, path), requestArchitecture(model),
   *   modelInputs (the core's model_inputs answer for the defaults' model), requestModelInputs(model)}
   */
  constructor(container, options) {
    this.container = container;
    this.doc = container.ownerDocument;
    this.schema = options.schema;
    this.catalogs = options.catalogs;
    this.onChange = options.onChange || (() => {});
    this.requestArchitecture = options.requestArchitecture || (async () => null);
    this.requestModelInputs = options.requestModelInputs || (async () => null);
    this.modelInputs = options.modelInputs || null;
    this.modelInputsFor = options.modelInputs ? JSON.stringify(options.defaults?.model ?? null) : null;
    this.fields = new Map(); // path -> {row, read(), write(value), error}
    this.conditional = []; // [{node, showIf}]
    this.setup = clone(options.defaults);
    this.lastReport = null;
  }

  // ------------------------------------------------------------------ building

  build() {
    const doc = this.doc;
    this.container.replaceChildren(); // the build-time render of the same form is replaced in place
    const root = this.schema;
    const covered = new Set();
    this.formError = el(doc, "p", { class: "form-error", role: "alert", "data-testid": "form-error", hidden: true });
    this.container.append(this.formError);
    const groups = [...GROUPS];
    const extra = Object.keys(root.properties).filter((key) => !groups.some((g) => g.fields.includes(key)));
    if (extra.length) groups.push({ id: "other", title: "Other", fields: extra });
    for (const group of groups) {
      const simple = el(doc, "div", { class: "fields" });
      const advanced = el(doc, "div", { class: "fields" });
      for (const path of group.fields) {
        if (!root.properties[path]) continue;
        covered.add(path);
        this.addField(path, schemaAt(root, path), simple, advanced);
      }
      const fieldset = el(doc, "fieldset", { class: "group", "data-group": group.id }, [el(doc, "legend", { text: group.title })]);
      if (simple.childElementCount) fieldset.append(simple);
      if (advanced.childElementCount) {
        const details = el(doc, "details", { class: "advanced" }, [el(doc, "summary", { text: "More options" }), advanced]);
        fieldset.append(details);
      }
      if (simple.childElementCount || advanced.childElementCount) this.container.append(fieldset);
    }
    this.container.addEventListener("input", (event) => this.handleInput(event));
    this.container.addEventListener("change", (event) => this.handleInput(event));
    this.updateVisibility();
  }

  addField(path, schema, simple, advanced) {
    const hint = hintFor(path);
    if (hint.widget === "model") return this.addModel(path, simple);
    if (hint.widget === "gpu") return this.addGpu(path, isAdvanced(path) ? advanced : simple, advanced);
    if (schema.properties && !isAtomic(schema, this.schema) && !isFreeForm(schema)) {
      const simpleBox = el(this.doc, "div", { class: "subfields", "data-field": path });
      const advancedBox = el(this.doc, "div", { class: "subfields", "data-field": path });
      for (const key of Object.keys(schema.properties)) {
        const child = `${path}.${key}`;
        this.addField(child, schemaAt(this.schema, child), simpleBox, advancedBox);
      }
      if (hint.showIf) {
        this.conditional.push({ node: simpleBox, showIf: hint.showIf }, { node: advancedBox, showIf: hint.showIf });
      }
      if (simpleBox.childElementCount) simple.append(simpleBox);
      if (advancedBox.childElementCount) advanced.append(advancedBox);
      return;
    }
    const row = this.leaf(path, schema);
    (isAdvanced(path) ? advanced : simple).append(row);
  }

  /**
   * A labelled row for a field: one input, or for an optional object or a discriminated union a
   * chooser with the chosen branch's fields (buildComposite). Registered in this.fields.
   */
  leaf(path, schema, options = {}) {
    const hint = hintFor(path);
    const shape = hint.widget ? null : compositeShape(schema, this.schema);
    const field = shape ? this.buildComposite(path, schema, shape) : this.buildLeaf(path, schema, options);
    this.fields.set(path, field);
    if (hint.showIf) this.conditional.push({ node: field.row, showIf: hint.showIf });
    return field.row;
  }

  /** A labelled row with one input for a leaf field: {row, input, read, write, error}. */
  buildLeaf(path, schema, { catalog } = {}) {
    const doc = this.doc;
    const hint = hintFor(path);
    const id = idFor(path);
    const spec = leafKind(schema, this.schema);
    const catalogName = catalog || (hint.widget || "").replace(/^catalog:/, "");
    let input;
    let read;
    let write;
    if (catalogName && this.catalogs[catalogName]) {
      spec.kind = "select";
      spec.values = this.catalogs[catalogName].map((item) => item.name);
      spec.labels = Object.fromEntries(this.catalogs[catalogName].map((item) => [item.name, item.display_name]));
    }
    const testid = `input-${path}`;
    if (spec.kind === "select") {
      input = el(doc, "select", { id, name: path, "data-testid": testid });
      // Option values are the field's values as text ("" for null), so the DOM says what is chosen.
      const values = spec.nullable ? [null, ...spec.values] : [...spec.values];
      const text = (value) => (value === null ? "" : String(value));
      const optionValues = values.map(text);
      for (const [index, value] of values.entries()) {
        const label = spec.labels?.[value] ?? hint.options?.[String(value)] ?? (value === null ? "Default" : String(value));
        input.append(el(doc, "option", { value: optionValues[index], text: label }));
      }
      read = () => {
        const chosen = selectValue(input);
        const index = optionValues.indexOf(chosen);
        return index < 0 ? chosen : values[index];
      };
      write = (value) => {
        // Matched by value and type: the text "true" or "2" from a link is not the boolean or the number.
        let index = value === undefined ? 0 : values.findIndex((candidate) => candidate === value);
        if (index < 0) {
          // A value from a link that the schema does not offer: keep it, so the core can name it.
          const shown = typeof value === "string" ? value : JSON.stringify(value);
          const optionValue = optionValues.includes(shown) ? JSON.stringify(shown) : shown;
          input.append(el(doc, "option", { value: optionValue, text: shown }));
          values.push(value);
          optionValues.push(optionValue);
          index = values.length - 1;
        }
        setSelectValue(input, optionValues[index]);
      };
    } else if (spec.kind === "checkbox") {
      input = el(doc, "input", { id, name: path, type: "checkbox", "data-testid": testid });
      read = () => input.checked;
      write = (value) => setChecked(input, Boolean(value));
    } else if (spec.kind === "number") {
      const s = spec.schema;
      input = el(doc, "input", {
        id,
        name: path,
        type: "number",
        inputmode: spec.integer ? "numeric" : "decimal",
        step: spec.integer ? "1" : "any",
        min: s.minimum ?? (s.exclusiveMinimum !== undefined ? (spec.integer ? s.exclusiveMinimum + 1 : undefined) : undefined),
        placeholder: spec.nullable ? "default" : undefined,
        "data-testid": testid,
      });
      read = () => {
        if (input.value === "") return spec.nullable ? null : input.validity?.badInput ? "not a number" : "";
        return Number(input.value);
      };
      write = (value) => {
        input.value = value === null || value === undefined ? "" : String(value);
      };
    } else if (spec.kind === "list") {
      input = el(doc, "input", {
        id,
        name: path,
        type: "text",
        autocomplete: "off",
        spellcheck: "false",
        placeholder: [spec.nullable ? "default" : null, "comma-separated", spec.constant].filter(Boolean).join(", or "),
        "data-testid": testid,
      });
      read = () => {
        const text = input.value.trim();
        if (spec.constant !== undefined && text === spec.constant) return spec.constant;
        if (!text) return spec.nullable ? null : [];
        return text.split(",").map((item) => item.trim()).filter(Boolean);
      };
      write = (value) => {
        input.value = Array.isArray(value) ? value.join(", ") : value ?? "";
      };
    } else if (spec.kind === "text") {
      input = el(doc, "input", { id, name: path, type: "text", autocomplete: "off", "data-testid": testid });
      read = () => (input.value === "" && spec.nullable ? null : input.value);
      write = (value) => {
        input.value = value ?? "";
      };
    } else {
      input = el(doc, "textarea", { id, name: path, rows: "4", spellcheck: "false", "data-testid": testid });
      read = () => parseJsonInput(input.value);
      write = (value) => {
        input.value = value === undefined ? "" : JSON.stringify(value, null, 2);
      };
    }
    if (spec.kind !== "select" && spec.kind !== "json") ({ read, write } = keepForeignValues(input, spec, read, write));
    const row = this.row(path, labelFor(path, schema), input, schema.description, hint);
    return { row, input, read, write, error: row.querySelector(".error") };
  }

  /**
   * Any value's control, unregistered (the fields of a composite's branches): a composite, a
   * plain object's fields, or a leaf. {row, read, write}.
   */
  buildValue(path, schema) {
    const shape = compositeShape(schema, this.schema);
    if (shape) return this.buildComposite(path, schema, shape);
    if (schema.properties && !isAtomic(schema, this.schema) && !isFreeForm(schema)) {
      const children = Object.entries(schema.properties).map(([key, child]) => {
        const childSchema = resolve(child, this.schema);
        return { key, schema: childSchema, control: this.buildValue(`${path}.${key}`, childSchema) };
      });
      const row = el(this.doc, "div", { class: "subfields", "data-field": path }, children.map((c) => c.control.row));
      return { row, read: () => readChildren(children), write: (value) => writeChildren(children, value) };
    }
    return this.buildLeaf(path, schema);
  }

  /**
   * An optional object (None, or its fields) or a discriminated union (one branch's fields, chosen
   * by its discriminator): a select, and under it the chosen branch's fields, built from the schema
   * like every other field. The value is replaced whole (the setup's atomic fields).
   */
  buildComposite(path, schema, shape) {
    const doc = this.doc;
    const hint = hintFor(path);
    const id = idFor(path);
    const select = el(doc, "select", { id, name: path, "data-testid": `input-${path}` });
    const choices = []; // {option value, branch | null}
    if (shape.nullable) choices.push({ value: "", label: hint.options?.null ?? "None (default)", branch: null });
    const keyCounts = new Map();
    for (const branch of shape.branches) for (const key of Object.keys(branch.schema.properties)) keyCounts.set(key, (keyCounts.get(key) || 0) + 1);
    for (const branch of shape.branches) {
      const value = shape.kind === "union" ? String(branch.value) : "set";
      const label = shape.kind === "union" ? hint.options?.[value] ?? branch.schema.title ?? value : hint.options?.set ?? "Set";
      const children = Object.entries(branch.schema.properties)
        .filter(([key]) => key !== shape.key)
        .map(([key, child]) => {
          const childSchema = resolve(child, this.schema);
          // A key in several branches gets the branch in its path, so that ids stay unique.
          const childPath = keyCounts.get(key) > 1 ? `${path}.${key}@${value}` : `${path}.${key}`;
          const control = this.buildValue(childPath, childSchema);
          const childHint = hintFor(childPath);
          if (childHint.showIf?.modelInput) this.conditional.push({ node: control.row, showIf: childHint.showIf });
          return { key, schema: childSchema, control };
        });
      const box = el(doc, "div", { class: "subfields", "data-field": path, "data-branch": value }, children.map((c) => c.control.row));
      choices.push({ value, label, branch: { ...branch, children, box } });
    }
    for (const choice of choices) {
      select.append(el(doc, "option", { value: choice.value, text: choice.label }));
      if (choice.branch) writeChildren(choice.branch.children, {}); // a branch chosen later starts from its defaults
    }
    const row = this.row(path, labelFor(path, schema), select, schema.description, hint);
    row.classList.add("composite");
    for (const choice of choices) if (choice.branch) row.append(choice.branch.box);
    let foreign = null; // {value} from a link that matches no branch: kept for the core to name
    const chosen = () => choices.find((choice) => choice.value === selectValue(select)) || choices[0];
    const showChosen = () => {
      const current = chosen();
      for (const choice of choices) if (choice.branch) choice.branch.box.hidden = choice !== current;
    };
    select.addEventListener("change", () => {
      foreign = null;
      showChosen();
    });
    const read = () => {
      if (foreign) return foreign.value;
      const { branch } = chosen();
      if (!branch) return null;
      const value = readChildren(branch.children);
      return shape.kind === "union" ? { [shape.key]: branch.value, ...value } : value;
    };
    const write = (value) => {
      foreign = null;
      if (value === null || value === undefined) {
        setSelectValue(select, choices[0].value);
        if (choices[0].branch) writeChildren(choices[0].branch.children, {});
      } else {
        const match = !isPlainObject(value)
          ? null
          : choices.find((choice) => choice.branch && (shape.kind === "optional" || choice.branch.value === value[shape.key]));
        if (!match) foreign = { value };
        else {
          setSelectValue(select, match.value);
          writeChildren(match.branch.children, value);
        }
      }
      showChosen();
    };
    showChosen();
    return { row, input: select, read, write, error: row.querySelector(".error") };
  }

  row(path, label, input, description, hint = {}) {
    const doc = this.doc;
    const id = input.id;
    const error = el(doc, "p", { class: "error", id: `${id}-error`, "data-testid": `error-${path}`, hidden: true });
    const describedBy = [`${id}-error`];
    const help = description ? el(doc, "p", { class: "help", id: `${id}-help`, text: description }) : null;
    if (help) describedBy.push(`${id}-help`);
    input.setAttribute("aria-describedby", describedBy.join(" "));
    const control = el(doc, "div", { class: "control" }, [input]);
    if (hint.suffix) control.append(el(doc, "span", { class: "suffix", text: hint.suffix }));
    const isCheckbox = input.type === "checkbox";
    const labelNode = el(doc, "label", { for: id, text: label });
    const row = el(doc, "div", { class: isCheckbox ? "field checkbox" : "field", "data-field": path }, isCheckbox ? [control, labelNode] : [labelNode, control]);
    if (isCheckbox) control.append(labelNode);
    if (help) row.append(help);
    row.append(error);
    return row;
  }

  // ------------------------------------------------------------------ the model

  addModel(path, parent) {
    const doc = this.doc;
    const select = el(doc, "select", { id: idFor("model.preset"), name: "model.preset", "data-testid": "input-model.preset" });
    const byOrg = new Map();
    for (const preset of this.catalogs.presets) {
      const org = preset.hf_id.split("/")[0];
      if (!byOrg.has(org)) byOrg.set(org, []);
      byOrg.get(org).push(preset);
    }
    for (const [org, list] of byOrg) {
      const group = el(doc, "optgroup", { label: org });
      for (const preset of list) group.append(el(doc, "option", { value: preset.name, text: preset.display_name }));
      select.append(group);
    }
    const own = el(doc, "optgroup", { label: "Your own model" });
    for (const [mode, label] of Object.entries(MODEL_MODES)) own.append(el(doc, "option", { value: `@${mode}`, text: label }));
    select.append(own);
    const row = this.row("model", "Model", select, "A published model, a Hugging Face config.json, or an architecture.");
    row.querySelector("label").setAttribute("for", select.id);

    // config.json: paste into the text area, drop a file anywhere on the form, or pick one.
    const textarea = el(doc, "textarea", {
      id: idFor("model.hf_config"),
      name: "model.hf_config",
      rows: "8",
      spellcheck: "false",
      placeholder: '{"model_type": "llama", "hidden_size": 4096, ...}',
      "data-testid": "input-model.hf_config",
    });
    const fileInput = el(doc, "input", { type: "file", accept: ".json,application/json", class: "visually-hidden", id: "config-file", tabindex: "-1" });
    const pick = el(doc, "button", { type: "button", class: "link-button", text: "choose a file" });
    pick.addEventListener("click", () => fileInput.click());
    fileInput.addEventListener("change", () => fileInput.files[0] && this.loadConfigFile(fileInput.files[0]));
    const drop = el(doc, "p", { class: "dropzone" }, [doc.createTextNode("Paste a Hugging Face config.json above, drop the file here, or "), pick, doc.createTextNode(".")]);
    const hfRow = this.row("model.hf_config", "config.json", textarea, null);
    hfRow.append(drop, fileInput);
    this.fields.set("model.hf_config", { row: hfRow, input: textarea, read: () => parseJsonInput(textarea.value), write: () => {}, error: hfRow.querySelector(".error") });

    // Architecture: the Architecture schema's fields, generated like every other field.
    const archSimple = el(doc, "div", { class: "subfields" });
    const archSchema = schemaAt(this.schema, "model.architecture");
    for (const key of Object.keys(archSchema.properties)) {
      const child = `model.architecture.${key}`;
      archSimple.append(this.leaf(child, resolve(archSchema.properties[key], this.schema)));
    }
    const archBox = el(doc, "div", { class: "model-architecture", "data-field": "model.architecture" }, [archSimple]);

    const countInput = el(doc, "input", { id: idFor("model.num_parameters"), name: "model.num_parameters", type: "number", min: "1", step: "1", inputmode: "numeric", "data-testid": "input-model.num_parameters" });
    const countRow = this.row("model.num_parameters", "Parameters", countInput, "Only a parameter count: model states, but no activations.");
    this.fields.set("model.num_parameters", {
      row: countRow,
      input: countInput,
      read: () => (countInput.value === "" ? "" : Number(countInput.value)),
      write: () => {},
      error: countRow.querySelector(".error"),
    });

    const box = el(doc, "div", { class: "model-field" }, [row, hfRow, archBox, countRow]);
    parent.append(box);
    this.model = { select, textarea, hfRow, archBox, countRow, countInput };
    this.fields.set("model", { row, input: select, read: () => this.readModel(), write: (value) => this.writeModel(value), error: row.querySelector(".error") });
    this.fields.set("model.preset", this.fields.get("model"));
    select.addEventListener("change", () => this.modelModeChanged());
  }

  modelMode() {
    const value = selectValue(this.model.select);
    return value.startsWith("@") ? value.slice(1) : "preset";
  }

  readModel() {
    const mode = this.modelMode();
    if (mode === "preset") return { preset: selectValue(this.model.select) };
    if (mode === "hf_config") return { hf_config: parseJsonInput(this.model.textarea.value) };
    if (mode === "num_parameters") return { num_parameters: this.fields.get("model.num_parameters").read() };
    const architecture = {};
    for (const [path, field] of this.fields) {
      if (!path.startsWith("model.architecture.")) continue;
      const value = field.read();
      if (value === null || value === "") continue; // unset optional fields take the core's defaults
      architecture[path.slice("model.architecture.".length)] = value;
    }
    return { architecture };
  }

  writeModel(model) {
    const m = this.model;
    if (!isPlainObject(model)) model = { preset: String(model ?? "") };
    if ("hf_config" in model) {
      setSelectValue(m.select, "@hf_config");
      m.textarea.value = typeof model.hf_config === "string" ? model.hf_config : JSON.stringify(model.hf_config, null, 2);
    } else if ("architecture" in model) {
      setSelectValue(m.select, "@architecture");
      for (const [path, field] of this.fields) {
        if (path.startsWith("model.architecture.")) field.write(getPath(model, path.slice("model.".length)) ?? null);
      }
    } else if ("num_parameters" in model) {
      setSelectValue(m.select, "@num_parameters");
      m.countInput.value = String(model.num_parameters ?? "");
    } else {
      const known = this.catalogs.presets.some((preset) => preset.name === model.preset);
      if (!known && model.preset) {
        // Keep an unknown preset from a link selectable, so the core's message can name it.
        const option = el(this.doc, "option", { value: model.preset, text: model.preset });
        m.select.prepend(option);
      }
      setSelectValue(m.select, model.preset);
    }
    this.showModelMode();
  }

  showModelMode() {
    const mode = this.modelMode();
    this.model.hfRow.hidden = mode !== "hf_config";
    this.model.archBox.hidden = mode !== "architecture";
    this.model.countRow.hidden = mode !== "num_parameters";
  }

  /** Switching to an own-model mode starts from the model that was selected. */
  async modelModeChanged() {
    const previous = this.setup.model;
    const mode = this.modelMode();
    this.showModelMode();
    const presetConfig = previous && previous.preset && this.catalogs.presets.find((p) => p.name === previous.preset)?.config;
    if (mode === "hf_config" && !this.model.textarea.value.trim()) {
      this.model.textarea.value = JSON.stringify(presetConfig || previous?.hf_config || {}, null, 2);
    } else if (mode === "num_parameters" && !this.model.countInput.value && this.lastReport) {
      this.model.countInput.value = String(this.lastReport.num_parameters);
    } else if (mode === "architecture") {
      const architecture = previous && !("architecture" in previous) ? await this.requestArchitecture(previous) : null;
      if (architecture) this.writeModel({ architecture });
    }
    this.emit("model");
  }

  async loadConfigFile(file) {
    const text = await file.text();
    setSelectValue(this.model.select, "@hf_config");
    this.model.textarea.value = text;
    this.showModelMode();
    this.emit("model.hf_config");
  }

  // ------------------------------------------------------------------ the GPU

  addGpu(path, parent, advanced) {
    const doc = this.doc;
    const select = el(doc, "select", { id: idFor("gpu"), name: "gpu", "data-testid": "input-gpu" });
    for (const gpu of this.catalogs.gpus) {
      const gib = gpu.memory_bytes / 2 ** 30;
      select.append(el(doc, "option", { value: gpu.name, text: `${gpu.display_name} (${gib.toFixed(1)} GiB)` }));
    }
    select.append(el(doc, "option", { value: "@custom", text: "Another GPU…" }));
    const row = this.row("gpu", "GPU", select, "The GPU model each rank runs on.");
    const customSchema = branches(schemaAt(this.schema, "gpu"), this.schema).find((branch) => branch.properties);
    const customBox = el(doc, "div", { class: "subfields", "data-field": "gpu.custom" });
    for (const key of Object.keys(customSchema.properties)) {
      customBox.append(this.leaf(`gpu.${key}`, resolve(customSchema.properties[key], this.schema)));
    }
    parent.append(row, customBox);
    this.gpu = { select, customBox };
    const read = () => {
      if (selectValue(select) !== "@custom") return selectValue(select);
      const custom = {};
      for (const key of Object.keys(customSchema.properties)) custom[key] = this.fields.get(`gpu.${key}`).read();
      return custom;
    };
    const write = (value) => {
      if (isPlainObject(value)) {
        setSelectValue(select, "@custom");
        for (const key of Object.keys(customSchema.properties)) {
          this.fields.get(`gpu.${key}`).write(value[key] ?? customSchema.properties[key].default ?? null);
        }
      } else {
        if (value && !this.catalogs.gpus.some((gpu) => gpu.name === value)) {
          select.prepend(el(doc, "option", { value, text: value }));
        }
        setSelectValue(select, value);
      }
      customBox.hidden = selectValue(select) !== "@custom";
    };
    select.addEventListener("change", () => {
      customBox.hidden = selectValue(select) !== "@custom";
    });
    this.fields.set("gpu", { row, input: select, read, write, error: row.querySelector(".error") });
  }

  // ------------------------------------------------------------------ values

  /** Show a full setup in the form. */
  setSetup(setup) {
    this.setup = clone(setup);
    for (const [path, field] of this.fields) {
      if (path === "model.preset" || path.startsWith("model.") || (path.startsWith("gpu.") && path !== "gpu")) continue;
      field.write(getPath(setup, path));
    }
    this.updateVisibility();
  }

  /** The full setup the form shows now (values may be invalid: the core will say). */
  getSetup() {
    const setup = clone(this.setup);
    for (const [path, field] of this.fields) {
      if (path === "model.preset" || path.startsWith("model.") || (path.startsWith("gpu.") && path !== "gpu")) continue;
      setPath(setup, path, field.read());
    }
    return setup;
  }

  handleInput(event) {
    const target = event.target;
    if (!target || !target.name || target.type === "file") return;
    if (target.name === "model.preset") return; // modelModeChanged emits
    if (event.type === "change" && target.tagName !== "SELECT" && target.type !== "checkbox") return;
    if (event.type === "input" && (target.tagName === "SELECT" || target.type === "checkbox")) return;
    this.emit(target.name);
  }

  emit(path) {
    let setup = this.getSetup();
    for (const coupling of COUPLINGS) {
      if (coupling.when === path) {
        coupling.apply(setup);
        this.setSetup(setup);
        setup = this.getSetup();
      }
    }
    this.setup = setup;
    this.updateVisibility(setup);
    this.onChange(clone(setup), path);
  }

  updateVisibility(setup = this.getSetup()) {
    for (const { node, showIf } of this.conditional) node.hidden = !showIf(setup, this.modelInputs);
    this.refreshModelInputs(setup);
  }

  /** Ask the core which optional inputs the model takes, once per model; show the fields when it answers. */
  refreshModelInputs(setup) {
    const key = JSON.stringify(setup.model ?? null);
    if (key === this.modelInputsFor) return;
    this.modelInputsFor = key;
    Promise.resolve(this.requestModelInputs(setup.model))
      .catch(() => null)
      .then((inputs) => {
        if (key !== this.modelInputsFor) return; // the model changed again meanwhile
        this.modelInputs = inputs;
        for (const { node, showIf } of this.conditional) node.hidden = !showIf(this.getSetup(), inputs);
      });
  }

  // ------------------------------------------------------------------ errors

  clearErrors() {
    this.formError.hidden = true;
    this.formError.textContent = "";
    for (const field of this.fields.values()) {
      field.error.hidden = true;
      field.error.textContent = "";
      field.input.removeAttribute("aria-invalid");
    }
  }

  /** Show the core's messages next to their fields; messages without a field go on top. */
  showErrors(errors) {
    this.clearErrors();
    const general = [];
    for (const { path, message } of errors) {
      const field = this.fieldForError(path, message);
      if (!field) {
        general.push(path ? `${path}: ${message}` : message);
        continue;
      }
      field.error.hidden = false;
      field.error.textContent = field.error.textContent ? `${field.error.textContent} ${message}` : message;
      field.input.setAttribute("aria-invalid", "true");
      const details = field.row.closest("details");
      if (details) details.open = true;
    }
    if (general.length) {
      this.formError.hidden = false;
      this.formError.textContent = general.join(" ");
    }
  }

  fieldForError(path, message) {
    const visible = (field) => field && !field.row.closest("[hidden]");
    for (let candidate = path; candidate; candidate = candidate.includes(".") ? candidate.slice(0, candidate.lastIndexOf(".")) : "") {
      const field = this.fields.get(candidate);
      if (visible(field)) return field;
      if (field && candidate.startsWith("model")) return this.fields.get("model");
    }
    // A check across fields ("num_gpus (3) must be a multiple of ..."): the field, under the
    // error's path, that the message starts with.
    const prefix = path ? `${path}.` : "";
    const named = [...this.fields.keys()]
      .filter((key) => key.startsWith(prefix))
      .filter((key) => message.startsWith(`${key} `) || message.startsWith(`${key.slice(prefix.length)} `))
      .sort((a, b) => b.length - a.length);
    return named.length ? this.fields.get(named[0]) : null;
  }
}

/** JSON typed into a text area; text that is not JSON becomes a message the core can't produce. */
function parseJsonInput(text) {
  try {
    return parseJson(text);
  } catch (error) {
    return { $invalidJson: error.message };
  }
}

export function invalidJsonErrors(setup) {
  const errors = [];
  const visit = (value, path) => {
    if (isPlainObject(value)) {
      if ("$invalidJson" in value) {
        errors.push({ path, message: `not valid JSON: ${value.$invalidJson}` });
        return;
      }
      for (const [key, item] of Object.entries(value)) visit(item, path ? `${path}.${key}` : key);
    }
  };
  visit(setup, "");
  return errors;
}
