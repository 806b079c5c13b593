// The engine's progress indicator, and a one-line description of a setup for titles.

export function setProgress(fraction, label) {
  const bar = document.querySelector('[data-testid="engine-progress"]');
  const text = document.getElementById("engine-label");
  const box = document.getElementById("engine-status");
  if (bar) {
    if (fraction === null) bar.removeAttribute("value");
    else bar.value = fraction;
    bar.hidden = fraction === 1;
  }
  if (text) text.textContent = label;
  if (box) box.dataset.state = fraction === 1 ? "ready" : fraction === null ? "failed" : "loading";
}

/** A full setup in one line: "Llama 3.1 8B · 8 × NVIDIA H100 SXM 80GB · ZeRO-2 · micro-batch 1 × 4096 tokens" */
export function describeSetup(setup, catalogs) {
  const model = setup.model || {};
  const preset = catalogs.presets.find((p) => p.name === model.preset);
  const modelName = preset
    ? preset.display_name
    : model.hf_config
      ? String(model.hf_config._name_or_path || model.hf_config.model_type || "custom config.json")
      : model.num_parameters
        ? `${model.num_parameters} parameters`
        : "custom model";
  const gpuName = typeof setup.gpu === "object" && setup.gpu !== null ? `${setup.gpu.memory_gib} GiB GPU` : setup.gpu;
  const gpu = catalogs.gpus.find((g) => g.name === gpuName);
  const p = setup.parallelism;
  const parts = [modelName, `${p.num_gpus} × ${gpu ? gpu.display_name : gpuName}`];
  if (p.zero_stage) parts.push(`ZeRO-${p.zero_stage}`);
  else if (p.strategy === "fsdp") parts.push("FSDP");
  const method = setup.finetuning.method;
  if (method && method !== "full") parts.push(method === "qlora" ? "QLoRA" : "LoRA");
  parts.push(`micro-batch ${setup.micro_batch_size} × ${setup.sequence_length} tokens`);
  return parts.join(" · ");
}
