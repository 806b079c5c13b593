// DOM helpers shared by the page's modules; they run in the browser and, at build time, under
// Node with linkedom (the pre-render), so they use only createElement, setAttribute and append.

/**
 * A new element: attributes by name (`text` sets its text; `true` an empty attribute; `undefined`,
 * `null` and `false` none), then the children that are not `null`, `undefined` or `false`.
 */
export function el(doc, tag, attributes = {}, children = []) {
  const node = doc.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined && child !== false) node.append(child);
  return node;
}
