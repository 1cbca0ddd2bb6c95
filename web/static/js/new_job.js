// @ts-check
// New job page: a form built from the spec's JSON Schema plus a raw JSON/YAML editor.
// YAML is parsed by the server (POST /ui/parse-spec, yaml.safe_load) so no hand-written parser
// runs here; JSON is parsed in the browser. 422 errors land under the field their loc names.
import { api, request, ApiError } from "./api.js";
import { $, h, setText } from "./dom.js";
import { fieldId, SchemaForm } from "./schema_form.js";

const SECTIONS = [
  ["Job", ["name", "model", "data", "loss"]],
  ["Your code (optional)", ["code", "entrypoint", "console_metrics"]],
  ["Strategy", ["nproc", "min_nproc", "nnodes", "accumulation_steps", "batch_size", "sync", "device", "precision", "compile", "sync_batchnorm"]],
  ["Length and evaluation", ["max_steps", "epochs", "log_every", "eval_every"]],
  ["Optimization", ["optimizer", "scheduler", "grad_clip_norm"]],
  ["Scheduling and limits", ["pool", "priority", "preemptible", "memory_limit_mb", "max_restarts", "stall_timeout_s"]],
  ["Checkpoints and recovery", ["checkpoint", "resume_from"]],
];

// The API's messages for a few kinds of mistake, in words (pydantic says "should match pattern '^[A-Z…'").
const PATTERN_WORDS = {
  name: "Use only letters, digits, '.', '_' and '-', starting with a letter or digit (at most 100 characters).",
  code: "Give an uploaded bundle as 'sha256:' followed by its 64 hex digits (rankzero submit --code DIR uploads one).",
};

export function inWords(d, path) {
  const msg = String(d.msg || "invalid").replace(/^Value error, /, "");
  if (d.type === "string_pattern_mismatch" || /should match pattern/.test(msg)) {
    return PATTERN_WORDS[path] || "Not in the expected form: see the hint under the field.";
  }
  if (d.type === "extra_forbidden") return "Not a field of the job spec: check its spelling (unknown fields are refused).";
  if (d.type === "int_parsing" || d.type === "int_from_float") return "Give a whole number.";
  if (d.type === "float_parsing") return "Give a number.";
  if (d.type === "missing") return "Required.";
  let m = msg.match(/^Input should be greater than or equal to (.+)$/);
  if (m) return `Must be at least ${m[1]}.`;
  m = msg.match(/^Input should be less than or equal to (.+)$/);
  if (m) return `Must be at most ${m[1]}.`;
  m = msg.match(/^Input should be greater than (.+)$/);
  if (m) return `Must be greater than ${m[1]}.`;
  m = msg.match(/^Input should be less than (.+)$/);
  if (m) return `Must be less than ${m[1]}.`;
  m = msg.match(/^String should have at most (\d+) characters?$/);
  if (m) return `At most ${m[1]} characters.`;
  if (d.type === "literal_error" || d.type === "enum") return msg.replace(/^Input should be /, "Choose ");
  return msg;
}

// Starting points for the built-in models and data (everything else keeps the schema defaults). Those
// whose data set is downloaded (`needs`) are listed apart and set `download: true`: a fresh install has no
// files, so the first job fetches them (once per host); offline, put the files in the datasets dir first.
const PRESETS = {
  "digits-mlp": { label: "digits · mlp — tiny, runs on CPU in seconds", spec: { name: "digits-mlp", model: { name: "mlp" }, data: { name: "digits" }, batch_size: 32, max_steps: 200, eval_every: 50, optimizer: { name: "sgd", lr: 0.05 }, checkpoint: { every_steps: 100, every_epochs: null } } },
  "digits-ddp": { label: "digits · mlp — DDP 2 × acc 2", spec: { name: "digits-ddp2-acc2", model: { name: "mlp" }, data: { name: "digits" }, batch_size: 8, accumulation_steps: 2, nproc: 2, max_steps: 200, eval_every: 50, optimizer: { name: "sgd", lr: 0.05 }, checkpoint: { every_steps: 100, every_epochs: null } } },
  "mnist-convnet": { needs: "MNIST", label: "MNIST · convnet", spec: { name: "mnist-convnet", model: { name: "convnet" }, data: { name: "mnist", args: { download: true } }, batch_size: 64, epochs: 2, optimizer: { name: "adamw", lr: 0.001, weight_decay: 0.01 } } },
  "fashion-convnet": { needs: "Fashion-MNIST", label: "Fashion-MNIST · convnet", spec: { name: "fashion-convnet", model: { name: "convnet" }, data: { name: "fashion_mnist", args: { download: true } }, batch_size: 64, epochs: 5, optimizer: { name: "adamw", lr: 0.001 }, scheduler: { name: "cosine", warmup_steps: 100 } } },
  "cifar10-resnet18": { needs: "CIFAR-10", label: "CIFAR-10 · resnet18 (GPU)", spec: { name: "cifar10-resnet18", model: { name: "resnet18" }, data: { name: "cifar10", args: { download: true } }, batch_size: 128, epochs: 30, device: "cuda", precision: "bf16", optimizer: { name: "sgd", lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.0005 }, scheduler: { name: "cosine", warmup_steps: 500 } } },
  "fake-resnet50": { label: "fake images · resnet50 — throughput test", spec: { name: "fake-resnet50", model: { name: "resnet50" }, data: { name: "fake" }, batch_size: 64, max_steps: 500, device: "cuda", precision: "bf16" } },
};

let form = null;
let mode = "form";

function readJson(id) {
  try { return JSON.parse($(id).textContent); } catch { return null; }
}

function showSummary(items) {
  const box = $("#form-errors");
  box.hidden = items.length === 0;
  if (!items.length) { box.replaceChildren(); return; }
  box.replaceChildren(
    h("p", { class: "alert-title" }, items.length === 1 ? "The job was not submitted:" : `The job was not submitted (${items.length} problems):`),
    h("ul", {}, ...items.map(({ path, message, field }) => h("li", {},
      path ? (field && mode === "form" ? h("a", { href: `#${field.input.id}` }, path) : h("code", {}, path)) : null,
      path ? ": " : null, message))),
  );
}

function clearErrors() {
  form.clearErrors();
  showSummary([]);
  $("#raw-error").hidden = true;
}

/** The raw editor's text as a spec object: JSON in the browser, anything else through the server's YAML parser. */
async function parseRaw() {
  const text = $("#raw-spec").value;
  try {
    return JSON.parse(text);
  } catch { /* not JSON: try YAML */ }
  const body = await request("/ui/parse-spec", { method: "POST", body: text, raw: true }).catch((err) => {
    throw new Error(err.body?.error || err.message);
  });
  return body.spec;
}

function currentSpecForBatch() {
  if (mode === "form") {
    try { return form.read(); } catch { return null; }
  }
  try { return JSON.parse($("#raw-spec").value); } catch { return null; }
}

function updateGlobalBatch() {
  const spec = currentSpecForBatch();
  if (!spec) return;
  const parts = ["batch_size", "accumulation_steps", "nproc", "nnodes"].map((k) => {
    const v = Number(spec[k] ?? form.schema.properties[k]?.default ?? 1);
    return Number.isFinite(v) && v > 0 ? v : NaN;
  });
  const total = parts.reduce((a, b) => a * b, 1);
  // A script job chooses its own batch: the built-in trainer's global batch says nothing about it.
  const batchLine = $("#global-batch")?.closest("p");
  if (batchLine instanceof HTMLElement) batchLine.hidden = Boolean(spec.entrypoint);
  setText($("#global-batch"), Number.isFinite(total) ? total.toLocaleString("en-US") : "–");
  setText($("#global-batch-formula"), `= ${parts.map((p) => (Number.isFinite(p) ? p : "?")).join(" × ")} (batch × accumulation × nproc × nnodes)`);
  updateResumeWarning(spec, total);
}

/** A resume that would train 0 steps, or change the global batch, is said before submitting (the server refuses both). */
function updateResumeWarning(spec, globalBatch) {
  const info = readJson("#resume-info");
  const box = $("#resume-warning");
  const problems = [];
  if (info && spec.resume_from) {
    const maxSteps = Number(spec.max_steps);
    if (spec.max_steps != null && Number.isFinite(maxSteps) && maxSteps <= info.step) {
      problems.push(`max_steps ${maxSteps.toLocaleString("en-US")} is not beyond the checkpoint's step ${info.step.toLocaleString("en-US")}: this resume would train 0 steps.`);
    }
    if (info.global_batch && Number.isFinite(globalBatch) && globalBatch !== info.global_batch) {
      problems.push(`The checkpoint was trained with global batch ${info.global_batch.toLocaleString("en-US")}; resuming needs the same.`);
    }
  }
  setText(box, problems.join(" "));
  box.hidden = problems.length === 0;
}

async function switchMode(next) {
  if (next === mode) return;
  if (next === "raw") {
    let spec;
    try { spec = form.read(); } catch (err) { showClientError(err); return; }
    $("#raw-spec").value = JSON.stringify(spec, null, 2);
  } else {
    try {
      form.write(await parseRaw());
      $("#raw-error").hidden = true;
    } catch (err) {
      const box = $("#raw-error");
      box.hidden = false;
      setText(box, err.message);
      return;
    }
  }
  mode = next;
  $("#panel-form").hidden = mode !== "form";
  $("#panel-raw").hidden = mode !== "raw";
  $("#tab-form").setAttribute("aria-selected", String(mode === "form"));
  $("#tab-raw").setAttribute("aria-selected", String(mode === "raw"));
  updateGlobalBatch();
}

function showClientError(err) {
  const field = err.path ? form.showError(err.path.split("."), err.message) : null;
  showSummary([{ path: err.path, message: err.message, field }]);
  if (field) field.input.focus();
}

function showApiErrors(err) {
  const detail = err.body?.detail;
  if (!Array.isArray(detail)) {
    showSummary([{ path: null, message: err.message }]);
    $("#form-errors").focus();
    return;
  }
  const items = detail.map((d) => {
    const loc = (d.loc || []).slice(d.loc?.[0] === "body" ? 1 : 0);
    const message = inWords(d, loc.join("."));
    const field = loc.length ? form.showError(loc, message) : null;
    return { path: loc.join(".") || null, message, field };
  });
  showSummary(items);
  const first = items.find((i) => i.field);
  if (mode === "form" && first) first.field.input.focus();
  else $("#form-errors").focus();
}

async function submit(event) {
  event.preventDefault();
  clearErrors();
  const button = $("#submit-job");
  button.disabled = true;
  setText(button, "Submitting…");
  try {
    let spec;
    if (mode === "form") {
      try { spec = form.read(); } catch (err) { showClientError(err); return; }
    } else {
      try { spec = await parseRaw(); } catch (err) {
        const box = $("#raw-error");
        box.hidden = false;
        setText(box, err.message);
        $("#raw-spec").focus();
        return;
      }
    }
    const job = await api("/jobs", { method: "POST", body: spec });
    location.assign(`/jobs/${job.id}`);
  } catch (err) {
    if (err instanceof ApiError) showApiErrors(err);
    else showSummary([{ path: null, message: err.message }]);
  } finally {
    button.disabled = false;
    setText(button, "Submit job");
  }
}

function applyPreset(key) {
  const preset = PRESETS[key];
  if (!preset) return;
  clearErrors();
  form.write(preset.spec);
  if (mode === "raw") $("#raw-spec").value = JSON.stringify(form.read(), null, 2);
  updateGlobalBatch();
}

/** The spec's rule, as you type: checkpoint.every_steps alone saves by steps only, so an every_epochs still at
 * its default (1, untouched) empties when every_steps gets a value, and comes back when it is cleared. */
function followStepsOnlyRule() {
  const steps = $(`#${fieldId("checkpoint.every_steps")}`);
  const epochs = $(`#${fieldId("checkpoint.every_epochs")}`);
  if (!steps || !epochs) return;
  let touched = false;
  epochs.addEventListener("input", () => { touched = true; });
  steps.addEventListener("input", () => {
    if (touched) return;
    if (steps.value !== "" && epochs.value === "1") epochs.value = "";
    else if (steps.value === "" && epochs.value === "") epochs.value = "1";
  });
}

/** The job name's rule, said in words as you type (the API would refuse it with a regex). */
function checkNameAsTyped(schema) {
  const input = $(`#${fieldId("name")}`);
  const pattern = schema.properties.name?.pattern;
  if (!input || !pattern) return;
  const re = new RegExp(pattern);
  const error = $(`#${fieldId("name")}-error`);
  input.addEventListener("input", () => {
    const bad = input.value !== "" && !re.test(input.value);
    error.hidden = !bad;
    setText(error, bad ? PATTERN_WORDS.name : "");
    if (bad) input.setAttribute("aria-invalid", "true"); else input.removeAttribute("aria-invalid");
  });
}

async function main() {
  const schema = await api("/schema/job-spec");
  form = new SchemaForm(schema, readJson("#builtins") || { models: [], data: [], losses: [] });
  const container = $("#spec-fields");
  const placed = new Set(SECTIONS.flatMap(([, keys]) => keys));
  const rest = Object.keys(schema.properties).filter((k) => !placed.has(k));
  container.replaceChildren(...SECTIONS.map(([title, keys]) => form.section(title, keys)), form.section("More", rest));
  form.root = container;

  const prefill = readJson("#prefill-spec");
  const presetSelect = $("#preset");
  presetSelect.replaceChildren(
    ...(prefill ? [h("option", { value: "" }, "(the copied spec)")] : []),
    ...Object.entries(PRESETS).filter(([, p]) => !p.needs).map(([key, p]) => h("option", { value: key }, p.label)),
    h("optgroup", { label: "Download their data set on first use (internet once, or its files in the datasets dir)" },
      ...Object.entries(PRESETS).filter(([, p]) => p.needs).map(([key, p]) => h("option", { value: key }, `${p.label} — downloads ${p.needs}`))),
  );
  if (prefill) form.write(prefill);
  else applyPreset("digits-mlp");
  presetSelect.addEventListener("change", () => applyPreset(presetSelect.value));

  followStepsOnlyRule();
  checkNameAsTyped(schema);
  $("#job-form").addEventListener("input", () => form.applyVisibility());
  $("#job-form").addEventListener("change", () => form.applyVisibility());
  $("#job-form").addEventListener("input", updateGlobalBatch);
  $("#job-form").addEventListener("change", updateGlobalBatch);
  $("#job-form").addEventListener("submit", submit);
  $("#tab-form").addEventListener("click", () => switchMode("form"));
  $("#tab-raw").addEventListener("click", () => switchMode("raw"));
  $("#job-form").dataset.ready = "true";
  updateGlobalBatch();
  // The name field gets focus so a keyboard user starts typing right away.
  $(`#${fieldId("name")}`)?.focus();
}

main().catch((err) => showSummary([{ path: null, message: `Could not load the job spec schema: ${err.message}` }]));
