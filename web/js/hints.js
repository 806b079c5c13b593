// The hand-written layer over the Setup schema: labels, grouping, what is "advanced", and
// the few widgets a schema cannot describe. A field the schema gains and this file does not
// name still appears, in the advanced part of its group, labelled from its schema title.

/** Groups of the form, in order; `fields` are dotted paths (a path names its whole subtree). */
export const GROUPS = [
  { id: "model", title: "Model", fields: ["model", "task"] },
  {
    id: "batch",
    title: "Batch and sequence",
    fields: ["micro_batch_size", "sequence_length", "target_length", "images", "gradient_accumulation_steps", "batch", "packed_sequences"],
  },
  {
    id: "training",
    title: "Precision and optimizer",
    fields: ["precision", "optimizer", "activation_checkpointing", "attention", "loss", "loss_chunks"],
  },
  { id: "parallelism", title: "GPUs and parallelism", fields: ["gpu", "parallelism", "headroom_fraction"] },
  { id: "finetuning", title: "Fine-tuning", fields: ["finetuning"] },
  { id: "trainer", title: "Trainer (TRL post-training)", fields: ["training"] },
  { id: "runtime", title: "Runtime", fields: ["runtime"] },
];

/**
 * Shown only where the core says the chosen model reads the field (trainmem.model_inputs, asked
 * through the engine when the model changes): image fields for vision-language models, the target
 * length for encoder-decoders. Until the core has answered for the model (inputs null), shown: the
 * form hides nothing it does not know to be unused. Marked `modelInput`, so that the fields of an
 * optional object (images.*) get the condition too.
 */
export const modelTakes = (path) => {
  const showIf = (setup, inputs) => !inputs || inputs.fields.includes(path);
  showIf.modelInput = true;
  return showIf;
};

/** The head is a choice when the model's family has several (an encoder), or the setup asks for another. */
const hasHeadChoice = (setup, inputs) =>
  !inputs || inputs.tasks.length > 1 || Boolean(setup.task?.kind && setup.task.kind !== inputs.default_task);

const IMAGE_FIELDS = {
  images_per_sample: { label: "Images per sample", advanced: false },
  image_height: { label: "Image height", advanced: false, suffix: "px" },
  image_width: { label: "Image width", advanced: false, suffix: "px" },
  min_pixels: { label: "min_pixels", suffix: "px" },
  max_pixels: { label: "max_pixels", suffix: "px" },
  longest_edge: { label: "Longest edge", suffix: "px" },
  videos_per_sample: { label: "Videos per sample" },
  video_frames: { label: "Frames per video" },
  video_height: { label: "Frame height", suffix: "px" },
  video_width: { label: "Frame width", suffix: "px" },
};

/**
 * Per-field hints, by dotted path:
 *   label     text of the label (default: the schema title)
 *   advanced  folded away under "More options" (default for fields not listed here: true)
 *   widget    "model" | "gpu" | "catalog:<name>" (a select filled from a catalog)
 *   options   labels for enum values
 *   showIf    (setup, modelInputs) => bool; hidden fields keep their value (modelInputs: the core's
 *             trainmem.model_inputs answer for the chosen model, or null before it is known)
 *   suffix    a unit shown after the input
 */
export const FIELDS = {
  model: { label: "Model", advanced: false, widget: "model" },
  "task.kind": { label: "Head (task)", advanced: false, showIf: (s, m) => hasHeadChoice(s, m) },
  "task.num_labels": {
    label: "Labels",
    showIf: (s, m) => hasHeadChoice(s, m) && !["causal_lm", "masked_lm", "embedding"].includes(s.task?.kind ?? m?.default_task),
  },
  micro_batch_size: { label: "Micro-batch size", advanced: false, suffix: "sequences / GPU" },
  sequence_length: { label: "Sequence length", advanced: false, suffix: "tokens" },
  target_length: { label: "Target length (decoder)", advanced: false, suffix: "tokens", showIf: modelTakes("target_length") },
  images: { label: "Images", advanced: false, options: { null: "None (text only)", set: "Set" }, showIf: modelTakes("images") },
  ...Object.fromEntries(
    Object.entries(IMAGE_FIELDS).map(([name, hint]) => [`images.${name}`, { ...hint, showIf: modelTakes(`images.${name}`) }]),
  ),
  gradient_accumulation_steps: { label: "Gradient accumulation steps", advanced: false },
  precision: {
    label: "Precision recipe",
    advanced: false,
    options: {
      fp32: "fp32",
      "amp-bf16": "AMP bf16 (torch.autocast)",
      "amp-fp16": "AMP fp16 (torch.autocast)",
      "bf16-mixed": "bf16 mixed (framework default)",
      "fp16-mixed": "fp16 mixed (framework default)",
      "bf16-master-weights": "bf16 + fp32 master weights (DeepSpeed)",
      "fp16-master-weights": "fp16 + fp32 master weights (ZeRO paper)",
      "bf16-master-weights-fp32-grads": "bf16 + fp32 grads and master (Megatron)",
      "bf16-pure": "pure bf16",
    },
  },
  "optimizer.name": { label: "Optimizer", advanced: false, widget: "catalog:optimizers" },
  "optimizer.implementation": { label: "Optimizer implementation", options: { null: "By device (default)" } },
  activation_checkpointing: {
    label: "Activation checkpointing",
    advanced: false,
    options: { none: "None", selective: "Selective (attention core)", full: "Full (every layer)" },
  },
  attention: {
    label: "Attention kernel",
    options: { sdpa: "SDPA", flash_attention_2: "FlashAttention 2", eager: "Eager", "sdpa-math": "SDPA math fallback" },
  },
  loss: { label: "Loss", options: { standard: "Standard cross-entropy", chunked: "Chunked cross-entropy", liger: "Liger fused linear cross-entropy" } },
  loss_chunks: { label: "Loss chunks", showIf: (s) => s.loss === "chunked" },
  gpu: { label: "GPU", advanced: false, widget: "gpu" },
  "gpu.memory_gib": { label: "GPU memory", suffix: "GiB" },
  "gpu.name": { label: "GPU name" },
  headroom_fraction: { label: "Headroom", advanced: false, suffix: "fraction kept free" },
  "parallelism.num_gpus": { label: "Number of GPUs", advanced: false },
  "parallelism.strategy": {
    label: "Data parallelism",
    advanced: false,
    options: { ddp: "PyTorch DDP", zero: "DeepSpeed ZeRO", fsdp: "PyTorch FSDP" },
  },
  "parallelism.zero_stage": {
    label: "ZeRO stage",
    advanced: false,
    options: { 0: "0 — no sharding", 1: "1 — optimizer states", 2: "2 — + gradients", 3: "3 — + weights" },
  },
  "parallelism.fsdp_sharding_strategy": {
    label: "FSDP sharding",
    advanced: false,
    showIf: (s) => s.parallelism?.strategy === "fsdp",
  },
  "parallelism.gpus_per_node": { label: "GPUs per node" },
  "parallelism.offload_optimizer": { label: "Offload optimizer to CPU" },
  "parallelism.offload_parameters": { label: "Offload parameters to CPU" },
  "parallelism.tensor_parallel_size": { label: "Tensor parallel size" },
  "parallelism.pipeline_parallel_size": { label: "Pipeline parallel size" },
  "parallelism.pipeline_schedule": {
    label: "Pipeline schedule (torch.distributed.pipelining)",
    showIf: (s) => (s.parallelism?.pipeline_parallel_size ?? 1) > 1,
  },
  "parallelism.sequence_parallel": { label: "Sequence parallel" },
  "parallelism.context_parallel_size": { label: "Context parallel size" },
  "parallelism.expert_parallel_size": { label: "Expert parallel size" },
  "parallelism.expert_tensor_parallel_size": { label: "Expert tensor parallel size" },
  "parallelism.bucket_size_mib": { label: "Communication bucket", suffix: "MiB" },
  "training.mode": {
    label: "Trainer",
    advanced: false,
    options: {
      sft: "Supervised step (transformers loss)",
      dpo: "DPO (DPOTrainer)",
      kto: "KTO (KTOTrainer)",
      orpo: "ORPO",
      cpo: "CPO",
      simpo: "SimPO",
      reward: "Reward model (RewardTrainer)",
      gkd: "GKD distillation",
      grpo: "GRPO (GRPOTrainer)",
    },
  },
  "training.loss_type": { label: "loss_type", showIf: (s) => ["dpo", "kto", "cpo", "grpo"].includes(s.training?.mode) },
  "training.beta": { label: "beta", showIf: (s) => !["sft", "reward"].includes(s.training?.mode ?? "sft") },
  "training.reference_model": { label: "Reference model", showIf: (s) => ["dpo", "kto", "grpo"].includes(s.training?.mode) },
  "training.precompute_ref_log_probs": { label: "Precompute reference log-probs", showIf: (s) => ["dpo", "kto"].includes(s.training?.mode) },
  "training.completion_only_loss": { showIf: (s) => (s.training?.mode ?? "sft") === "sft" },
  "training.assistant_only_loss": { showIf: (s) => (s.training?.mode ?? "sft") === "sft" },
  "training.lmbda": { showIf: (s) => s.training?.mode === "gkd" },
  "training.teacher": { showIf: (s) => s.training?.mode === "gkd" },
  "training.num_generations": { label: "Generations per prompt", advanced: false, showIf: (s) => s.training?.mode === "grpo" },
  "training.max_prompt_length": { label: "Prompt length", advanced: false, suffix: "tokens", showIf: (s) => s.training?.mode === "grpo" },
  "training.max_completion_length": { label: "Completion length", advanced: false, suffix: "tokens", showIf: (s) => s.training?.mode === "grpo" },
  "training.num_iterations": { showIf: (s) => s.training?.mode === "grpo" },
  "training.use_vllm": { label: "Generate with vLLM", showIf: (s) => s.training?.mode === "grpo" },
  "training.vllm_mode": { label: "vLLM mode", showIf: (s) => s.training?.mode === "grpo" && s.training?.use_vllm === true },
  "training.vllm_gpu_memory_utilization": { label: "vLLM GPU memory share", showIf: (s) => s.training?.mode === "grpo" && s.training?.use_vllm === true },
  "training.vllm_enable_sleep_mode": { label: "vLLM sleep mode", showIf: (s) => s.training?.mode === "grpo" && s.training?.use_vllm === true },
  "finetuning.method": {
    label: "Method",
    advanced: false,
    options: { full: "Full fine-tuning", lora: "LoRA", qlora: "QLoRA (4-bit base)" },
  },
  "finetuning.lora.r": { label: "LoRA rank r", advanced: false, showIf: (s) => s.finetuning?.method !== "full" },
  "finetuning.lora.target_modules": {
    label: "LoRA target modules",
    advanced: false,
    showIf: (s) => s.finetuning?.method !== "full",
  },
  "finetuning.lora.lora_dropout": { label: "LoRA dropout", showIf: (s) => s.finetuning?.method !== "full" },
  "finetuning.lora.modules_to_save": { label: "Modules to save (trained copies)", showIf: (s) => s.finetuning?.method !== "full" },
  "finetuning.lora.use_dora": { label: "DoRA", showIf: (s) => s.finetuning?.method !== "full" },
  batch: { label: "Batch layout", options: { padded: "Padded rows", padded_masked: "Padded rows with an attention mask", packed: "Packed row (padding-free)" } },
  packed_sequences: { label: "Sequences per packed row", showIf: (s) => s.batch === "packed" },
  "finetuning.quantization": { showIf: (s) => s.finetuning?.method === "qlora" },
  "finetuning.quantization.bits": { label: "Quantized bits" },
  "finetuning.quantization.quant_type": { label: "4-bit type" },
  "finetuning.quantization.double_quant": { label: "Double quantization" },
  "finetuning.quantization.compute_dtype": { label: "Compute dtype" },
  "finetuning.frozen": { label: "Frozen groups", showIf: (s) => s.finetuning?.method === "full" },
  "runtime.device": { label: "Device" },
  "runtime.cuda_context_mib": { label: "CUDA context", suffix: "MiB" },
};

/** Changing one field implies another (the form keeps the pair consistent for the user). */
export const COUPLINGS = [
  {
    when: "parallelism.zero_stage",
    sets: "parallelism.strategy",
    apply(setup) {
      const p = setup.parallelism;
      if (p.zero_stage > 0) p.strategy = "zero";
    },
  },
  {
    when: "parallelism.strategy",
    sets: "parallelism.zero_stage",
    apply(setup) {
      const p = setup.parallelism;
      if (p.strategy !== "zero") p.zero_stage = 0;
    },
  },
];

/**
 * Apply the couplings of the given paths, where the other field of the pair is not among
 * them (a link that sets only zero_stage: 3 means DeepSpeed ZeRO, as the core reads it).
 */
export function applyCouplings(setup, paths) {
  for (const coupling of COUPLINGS) {
    if (paths.includes(coupling.when) && !paths.includes(coupling.sets)) coupling.apply(setup);
  }
  return setup;
}

export function hintFor(path) {
  return FIELDS[path] || {};
}

/** Fields not named above are advanced: new fields never clutter the simple form. */
export function isAdvanced(path) {
  const hint = FIELDS[path];
  return hint ? hint.advanced !== false : true;
}

export function labelFor(path, schema) {
  const hint = FIELDS[path];
  if (hint && hint.label) return hint.label;
  const title = schema && schema.title;
  if (title) return title;
  const last = path.split(".").pop();
  return last.replaceAll("_", " ").replace(/^./, (c) => c.toUpperCase());
}
