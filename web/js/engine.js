// The page's handle on the Python engine: Pyodide running trainmem in a module Web Worker.
//
// compute() always answers the latest request: while one runs, newer requests replace the
// queued one, and the replaced promises resolve to {superseded: true}.

export class Engine {
  constructor({ workerUrl, wheels, modules, onProgress }) {
    this.workerUrl = workerUrl;
    this.wheels = wheels;
    this.modules = modules;
    this.progressListener = onProgress || null;
    this.lastProgress = null;
    this.worker = null;
    this.ready = null;
    this.nextId = 1;
    this.pending = new Map(); // id -> {resolve, reject}
    this.running = false;
    this.queued = null; // {setupJson, resolve}
  }

  /** Who hears about loading progress; a late listener first hears the latest message. */
  set onProgress(listener) {
    this.progressListener = listener;
    if (listener && this.lastProgress) listener(this.lastProgress);
  }

  /** Start loading Pyodide (idempotent); resolves when trainmem is imported. */
  start() {
    if (this.ready) return this.ready;
    this.worker = new Worker(this.workerUrl, { type: "module" });
    this.worker.addEventListener("message", (event) => this.receive(event.data));
    this.worker.addEventListener("error", (event) => {
      for (const { reject } of this.pending.values()) reject(new Error(event.message || "the engine failed"));
      this.pending.clear();
    });
    this.ready = this.call("boot", { wheels: this.wheels, modules: this.modules });
    return this.ready;
  }

  get started() {
    return this.ready !== null;
  }

  call(type, payload) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, type, ...payload });
    });
  }

  receive(message) {
    if (message.type === "progress") {
      performance.mark(`trainmem:engine-${message.stage}`); // read by benchmarks/bench_site.py
      this.lastProgress = message;
      if (this.progressListener) this.progressListener(message);
      return;
    }
    const waiter = this.pending.get(message.id);
    if (!waiter) return;
    this.pending.delete(message.id);
    if (message.error) waiter.reject(new Error(message.error));
    else waiter.resolve(message.result);
  }

  /**
   * Estimate a setup (an object); resolves to {ok, report | errors} or {superseded: true}.
   * `suggestions: false` leaves out the report's suggestions, which cost most of the time.
   */
  async compute(setup, { suggestions = true } = {}) {
    await this.start();
    const setupJson = JSON.stringify(setup);
    return new Promise((resolve) => {
      if (this.queued) this.queued.resolve({ superseded: true });
      this.queued = { setupJson, suggestions, resolve };
      this.drain();
    });
  }

  /**
   * Estimate a setup outside the latest-request queue (the pinned setup of compare mode, the
   * Markdown report): never superseded; resolves to {ok, report | errors}.
   */
  async computeOnce(setup, { suggestions = false } = {}) {
    await this.start();
    return JSON.parse(await this.call("compute", { setupJson: JSON.stringify(setup), suggestions }));
  }

  /** A report (an object) as Markdown, by the core's trainmem.render_markdown. */
  async markdown(report, title = "") {
    await this.start();
    return this.call("markdown", { reportJson: JSON.stringify(report), title });
  }

  /** Report B against report A (objects) as the core's Markdown comparison (trainmem.compare). */
  async compareMarkdown(a, b, aLabel, bLabel) {
    await this.start();
    return this.call("compareMarkdown", { aJson: JSON.stringify(a), bJson: JSON.stringify(b), aLabel, bLabel });
  }

  /** True while nothing is computing or waiting (the page asks for suggestions only then). */
  get idle() {
    return !this.running && !this.queued;
  }

  async drain() {
    if (this.running || !this.queued) return;
    const { setupJson, suggestions, resolve } = this.queued;
    this.queued = null;
    this.running = true;
    try {
      resolve(JSON.parse(await this.call("compute", { setupJson, suggestions })));
    } catch (error) {
      resolve({ ok: false, errors: [{ path: "", message: `internal error: ${error.message}` }] });
    } finally {
      this.running = false;
      this.drain();
    }
  }

  /** The Architecture the core reads from a model spec, or null. */
  async architecture(model) {
    await this.start();
    const answer = JSON.parse(await this.call("architecture", { modelJson: JSON.stringify(model) }));
    return answer.ok ? answer.architecture : null;
  }
}
