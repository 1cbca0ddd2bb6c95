// @ts-check
// Builds form fields from the JobSpec JSON Schema (GET /api/schema/job-spec) and converts between
// the form and a spec object. Each field's wrapper carries data-path="optimizer.lr", which is how
// 422 errors (detail[].loc) find the field they concern.
import { h } from "./dom.js";

export function fieldId(path) {
  return `f-${path.replace(/[^A-Za-z0-9]+/g, "-")}`;
}

/** Follows $ref and folds `anyOf: [X, {type: null}]` into X with nullable: true. */
export function resolve(node, defs) {
  let out = { ...node };
  if (out.$ref) {
    const target = defs[out.$ref.split("/").pop()];
    const { $ref, ...rest } = out;
    out = { ...target, ...rest };
  }
  if (Array.isArray(out.anyOf)) {
    const nonNull = out.anyOf.filter((n) => n.type !== "null");
    if (nonNull.length === 1 && nonNull.length < out.anyOf.length) {
      const { anyOf, ...rest } = out;
      out = { ...resolve(nonNull[0], defs), ...rest, nullable: true };
    }
  }
  return out;
}

function kindOf(node) {
  if (node.enum) return "enum";
  if (node.type === "object" && node.properties) return "object";
  if (node.type === "object" || node.type === "array") return "json";
  if (node.type === "boolean") return "boolean";
  if (node.type === "integer" || node.type === "number") return "number";
  return "string";
}

function humanTitle(key, node) {
  return node.title && !/Spec$/.test(node.title) ? node.title : key.replace(/_/g, " ").replace(/^./, (c) => c.toUpperCase());
}

export class SchemaForm {
  /** @param schema the JobSpec JSON Schema; builtins: {models, data, losses} for the name pickers */
  constructor(schema, builtins) {
    this.schema = schema;
    this.defs = schema.$defs || {};
    this.builtins = builtins;
    this.fields = new Map(); // path -> {node, kind, input, wrapper, error}
    this.nullToggles = new Map(); // path of a nullable object -> checkbox
    /** @type {HTMLElement | null} the element the sections were placed in (set by the page) */
    this.root = null;
  }

  /** The <fieldset> for one top-level group of keys. */
  section(title, keys) {
    // Keys keep their order: scalars gather in a grid, an object gets its own sub-fieldset.
    const box = h("fieldset", { class: "section" }, h("legend", {}, title));
    let grid = null;
    for (const key of keys) {
      const node = this.schema.properties[key];
      if (!node) continue;
      const resolved = resolve(node, this.defs);
      if (kindOf(resolved) === "object") {
        box.append(this.objectFieldset(key, resolved));
        grid = null;
      } else {
        if (!grid) { grid = h("div", { class: "grid" }); box.append(grid); }
        grid.append(this.field(key, key, resolved));
      }
    }
    return box;
  }

  objectFieldset(path, node) {
    const box = h("fieldset", { class: "sub", dataset: { path } }, h("legend", {}, humanTitle(path.split(".").pop(), node)));
    const grid = h("div", { class: "grid" });
    if (node.nullable) {
      // A nullable object whose default is null (spec `environment`) starts as None: its empty fields are no value.
      const toggle = h("input", { type: "checkbox", id: fieldId(`${path}-null`), dataset: { defaultNull: node.default === null ? "true" : "" } });
      toggle.addEventListener("change", () => {
        for (const [p, f] of this.fields) if (p.startsWith(`${path}.`)) f.input.disabled = toggle.checked;
      });
      this.nullToggles.set(path, toggle);
      box.append(h("label", { class: "check null-toggle", for: toggle.id }, toggle, ` None (${node.description || "null"})`));
    }
    for (const [key, child] of Object.entries(node.properties)) {
      const resolved = resolve(child, this.defs);
      const childPath = `${path}.${key}`;
      if (kindOf(resolved) === "object") box.append(this.objectFieldset(childPath, resolved));
      else grid.append(this.field(childPath, key, resolved));
    }
    box.append(grid);
    return box;
  }

  field(path, key, node) {
    const kind = kindOf(node);
    const id = fieldId(path);
    const hintId = `${id}-hint`;
    const errorId = `${id}-error`;
    const common = { id, name: path, "aria-describedby": `${hintId} ${errorId}` };
    let input;
    if (kind === "enum") {
      input = h("select", common,
        node.nullable ? h("option", { value: "" }, "(none)") : null,
        ...node.enum.map((v) => h("option", { value: v }, v)));
    } else if (kind === "boolean") {
      input = h("input", { ...common, type: "checkbox" });
    } else if (kind === "number") {
      const min = node.minimum ?? node.exclusiveMinimum;
      const max = node.maximum ?? node.exclusiveMaximum;
      input = h("input", { ...common, type: "number", inputmode: node.type === "integer" ? "numeric" : "decimal", step: node.type === "integer" ? 1 : "any", min, max, placeholder: node.nullable ? "none" : null });
    } else if (kind === "json") {
      input = h("textarea", { ...common, rows: 2, spellcheck: "false", class: "mono", placeholder: node.type === "array" ? "[…]" : "{}" });
    } else {
      input = h("input", { ...common, type: "text", spellcheck: "false", placeholder: this.presetNames(path) ? "package.module:function" : node.nullable ? "none" : null, maxlength: node.maxLength });
    }
    const pick = this.pickList(path, id, input);
    const error = h("p", { class: "field-error", id: errorId, hidden: true });
    const hint = h("p", { class: "hint", id: hintId }, node.description || "");
    const label = h("label", { for: id }, humanTitle(key, node), h("code", { class: "key" }, key));
    const wrapper = kind === "boolean"
      ? h("div", { class: "field field-check", dataset: { path } }, h("div", { class: "check-row" }, input, label), hint, error)
      : h("div", { class: `field field-${kind}`, dataset: { path } }, pick ? h("label", { for: pick.id }, humanTitle(key, node), h("code", { class: "key" }, key)) : label, pick, input, hint, error);
    if (pick) label.classList.add("visually-hidden");
    if (pick) input.before(label);
    this.fields.set(path, { node, kind, input, wrapper, error, pick });
    return wrapper;
  }

  /** A select of the built-in names (model, data set, loss) and "your own code", which opens a text field. */
  pickList(path, id, input) {
    const names = this.presetNames(path);
    if (!names) return null;
    const pick = h("select", { id: `${id}-pick`, "aria-describedby": `${id}-hint ${id}-error` },
      ...names.map((v) => h("option", { value: v }, v)),
      h("option", { value: CUSTOM }, "your own code (package.module:function)…"));
    pick.addEventListener("change", () => {
      const custom = pick.value === CUSTOM;
      input.hidden = !custom;
      if (custom) {
        if (names.includes(input.value)) input.value = "";
        input.focus();
      } else {
        input.value = pick.value;
      }
      input.dispatchEvent(new Event("input", { bubbles: true }));
    });
    return pick;
  }

  /** Shows only the fields that apply to the spec as it stands (Adam settings for Adam, elastic for nproc > 1…). */
  applyVisibility() {
    const spec = this.readAll();
    for (const [path, f] of this.fields) f.wrapper.hidden = !applies(path, spec, this.builtins);
    for (const box of this.root?.querySelectorAll("fieldset.sub") || []) {
      if (!(box instanceof HTMLElement)) continue;
      const top = box.dataset.path;
      box.hidden = !applies(top, spec, this.builtins);
    }
    for (const section of this.root?.querySelectorAll("fieldset.section") || []) {
      if (!(section instanceof HTMLElement)) continue;
      const shown = Array.from(section.querySelectorAll(".field, fieldset.sub")).some(
        (el) => el instanceof HTMLElement && !el.hidden && !el.closest("fieldset.sub[hidden]"),
      );
      section.hidden = !shown;
    }
  }

  /** Built-in names offered for model/data/loss (user code 'pkg.module:fn' can still be typed). */
  presetNames(path) {
    return { "model.name": this.builtins.models, "data.name": this.builtins.data, "loss.name": this.builtins.losses }[path] || null;
  }

  /** Every field's value, applicable or not (a JSON field that does not parse is left out). */
  readAll() {
    const spec = {};
    for (const [path, f] of this.fields) {
      const nullParent = Array.from(this.nullToggles.keys()).find((p) => path.startsWith(`${p}.`) && this.nullToggles.get(p).checked);
      if (nullParent) { setPath(spec, nullParent, null); continue; }
      let value;
      try { value = readField(path, f); } catch { continue; }
      if (value !== undefined) setPath(spec, path, value);
    }
    return spec;
  }

  /** The spec the form describes, without the fields that do not apply to it (hidden ones); throws
   * {path, message} for a JSON field that does not parse. */
  read() {
    const all = this.readAll();
    const spec = {};
    for (const [path, f] of this.fields) {
      if (!applies(path, all, this.builtins)) continue;
      const nullParent = Array.from(this.nullToggles.keys()).find((p) => path.startsWith(`${p}.`) && this.nullToggles.get(p).checked);
      if (nullParent) { if (applies(nullParent, all, this.builtins)) setPath(spec, nullParent, null); continue; }
      const value = readField(path, f);
      if (value !== undefined) setPath(spec, path, value);
    }
    return spec;
  }

  /** Fills every field from a spec; missing keys fall back to the schema's defaults. */
  write(spec) {
    for (const [path, toggle] of this.nullToggles) {
      const given = getPath(spec, path);
      toggle.checked = given === null || (given === undefined && toggle.dataset.defaultNull === "true");
      toggle.dispatchEvent(new Event("change"));
    }
    for (const [path, f] of this.fields) {
      const given = getPath(spec, path);
      writeField(f, given === undefined ? f.node.default : given);
    }
    this.applyVisibility();
  }

  clearErrors() {
    for (const f of this.fields.values()) {
      f.error.hidden = true;
      f.error.textContent = "";
      f.input.removeAttribute("aria-invalid");
      f.wrapper.classList.remove("has-error");
    }
  }

  /** Puts a message under the field a loc points to (or its closest ancestor); false if none. */
  showError(loc, message) {
    const parts = loc.map(String);
    for (let n = parts.length; n > 0; n--) {
      const f = this.fields.get(parts.slice(0, n).join("."));
      if (!f) continue;
      f.error.textContent = f.error.textContent ? `${f.error.textContent} ${message}` : message;
      f.error.hidden = false;
      f.input.setAttribute("aria-invalid", "true");
      f.wrapper.classList.add("has-error");
      return f;
    }
    return null;
  }
}

function readField(path, f) {
  const { kind, input, node } = f;
  if (kind === "boolean") return input.checked;
  const raw = input.value.trim();
  if (raw === "") return node.nullable ? null : undefined;
  if (kind === "number") {
    const n = Number(raw);
    return Number.isFinite(n) ? n : raw; // a non-number goes to the API, which says what is wrong
  }
  if (kind === "json") {
    try { return JSON.parse(raw); } catch (err) { throw Object.assign(new Error(`not valid JSON: ${err.message}`), { path }); }
  }
  return raw;
}

function writeField(f, value) {
  const { kind, input } = f;
  if (kind === "boolean") input.checked = Boolean(value);
  else if (kind === "json") input.value = value === undefined || value === null ? (f.node.type === "object" ? "{}" : "") : JSON.stringify(value);
  else input.value = value === undefined || value === null ? "" : String(value);
  if (f.pick) {
    const builtin = Array.from(f.pick.options).some((o) => o.value === input.value && o.value !== CUSTOM);
    f.pick.value = builtin ? input.value : CUSTOM;
    input.hidden = builtin;
  }
}

const CUSTOM = "__custom__";
const ADAM = new Set(["adam", "adamw"]);

/** Whether a field (dotted path) means something for this spec; a hidden field is not submitted. */
export function applies(path, spec, builtins) {
  const top = path.split(".")[0];
  if (spec.entrypoint && (builtins.builtin_only || []).includes(top)) return false; // a script job's own business
  if (top === "console_metrics") return Boolean(spec.entrypoint); // read from a script's console only
  const world = (Number(spec.nproc) || 1) * (Number(spec.nnodes) || 1);
  const optimizer = spec.optimizer?.name;
  const scheduler = spec.scheduler?.name;
  switch (path) {
    case "optimizer.momentum": case "optimizer.nesterov": return optimizer === "sgd";
    case "optimizer.betas": case "optimizer.eps": return ADAM.has(optimizer);
    case "scheduler.min_lr_ratio": return scheduler === "cosine";
    case "scheduler.step_size": case "scheduler.gamma": return scheduler === "step";
    case "min_nproc": return (Number(spec.nproc) || 1) > 1 && (Number(spec.nnodes) || 1) === 1;
    case "sync_batchnorm": return world > 1 || spec.sync_batchnorm === true;
    case "entrypoint": return true;
    default: return true;
  }
}

export function getPath(obj, path) {
  let cur = obj;
  for (const part of path.split(".")) {
    if (cur === null || typeof cur !== "object" || !(part in cur)) return undefined;
    cur = cur[part];
  }
  return cur;
}

export function setPath(obj, path, value) {
  const parts = path.split(".");
  let cur = obj;
  for (const part of parts.slice(0, -1)) {
    if (cur[part] === null) return; // the whole object was set to null
    if (typeof cur[part] !== "object") cur[part] = {};
    cur = cur[part];
  }
  cur[parts[parts.length - 1]] = value;
}
