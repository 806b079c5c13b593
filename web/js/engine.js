// The page's handle on the Python engine: Pyodide running trainmem in a module Web Worker.
//
// compute() always answers the latest request: while one runs, newer requests replace the
// queued one, and the replaced promises resolve to {superseded: true}.
//
// The worker gets one request at a time (call(): a first-in, first-out line here, not in the
// worker's message queue), so each request's time is its own. A request that runs longer than
// `computeLimitMs` (none should: the core bounds every size, and its slowest accepted setup estimates
// in well under a second on CPython) is cancelled: Python in a worker cannot be interrupted, so the
// worker is terminated and a new one boots in its place; the cancelled request resolves to
// {ok: false, cancelled: true, errors: [one message saying so]}. The requests waiting behind it are
// not cancelled with it: they go to the new worker once it is booted, each under the limit in force
// when it is sent.

/** How many replayed answers the worker keeps (trainmem_web.ANSWERS_KEPT). */
export const ANSWERS_KEPT = 32;

/** The default limit of one request to the engine, in milliseconds (generous: a phone is slow). */
export const COMPUTE_LIMIT_MS = 30_000;

export class EngineCancelled extends Error {}

/** The message of a cancelled compute, for the page to show inline. */
export function cancelledMessage(limitMs) {
  const seconds = limitMs >= 1000 ? `${Math.round(limitMs / 1000)} s` : `${limitMs} ms`;
  return `The computation ran longer than ${seconds} and was cancelled (the Python engine restarts). Change a value to try again.`;
}

export class Engine {
  constructor({ workerUrl, wheels, modules, python, onProgress }) {
    this.workerUrl = workerUrl;
    this.wheels = wheels;
    this.modules = modules;
    this.python = python; // the bundle of the page's Python code (build_site.py bundle_python)
    this.progressListener = onProgress || null;
    this.lastProgress = null;
    this.worker = null;
    this.ready = null;
    this.nextId = 1;
    this.pending = new Map(); // id -> {resolve, reject}
    this.running = false;
    this.queued = null; // {setupJson, resolve}
    this.computeLimitMs = COMPUTE_LIMIT_MS; // a public setting (tests lower it)
    this.restarts = 0; // how many times a cancelled request restarted the worker
    this.waiting = []; // requests not sent yet, oldest first: {type, payload, resolve, reject}
    this.sending = null; // the request the worker has now
    // Prefetch (issue 14): setups one control step away, computed while nothing else waits.
    this.prefetchQueue = []; // setup JSON texts, next first
    this.prefetching = false;
    this.kept = new Map(); // setup JSON text -> true: the answers trainmem_web keeps (its LRU, mirrored)
    this.onPrefetched = null; // (remaining) => void, after each prefetched setup
  }

  /** Who hears about loading progress; a late listener first hears the latest message. */
  set onProgress(listener) {
    this.progressListener = listener;
    if (listener && this.lastProgress) listener(this.lastProgress);
  }

  /**
   * Start loading Pyodide (idempotent); resolves when trainmem is imported. The first start takes
   * over the worker that the page's head started with the page (web/js/early.js), when there is one.
   */
  start() {
    if (this.ready) return this.ready;
    const early = takeEarlyWorker();
    const worker = early ? early.worker : new Worker(this.workerUrl, { type: "module" });
    this.worker = worker;
    const failed = (message) => {
      if (worker !== this.worker) return;
      for (const { reject } of this.pending.values()) reject(new Error(message || "the engine failed"));
      this.pending.clear();
    };
    if (early) {
      this.ready = new Promise((resolve, reject) => this.pending.set(0, { resolve, reject })); // its boot (id 0)
      early.detach();
      for (const { data, error, at } of early.heard) {
        if (error !== undefined) failed(error);
        else this.receive(data, at);
      }
    }
    worker.addEventListener("message", (event) => worker === this.worker && this.receive(event.data));
    worker.addEventListener("error", (event) => failed(event.message));
    if (!early) this.ready = this.post("boot", { wheels: this.wheels, modules: this.modules, python: this.python });
    return this.ready;
  }

  /**
   * Terminate the worker (Python cannot be interrupted otherwise), fail the one request it had with
   * EngineCancelled, and boot a new one in the background (the requests still waiting are sent to it).
   */
  restart(reason) {
    const worker = this.worker;
    this.worker = null;
    this.ready = null;
    if (worker) worker.terminate();
    this.kept.clear(); // a new worker keeps nothing
    this.prefetchQueue = [];
    const error = new EngineCancelled(reason);
    for (const { reject } of this.pending.values()) reject(error);
    this.pending.clear();
    this.restarts += 1;
    this.start().catch(() => {}); // a failed boot is reported to the next caller of start()
  }

  get started() {
    return this.ready !== null;
  }

  /** Send one message to the current worker; resolves to its answer. */
  post(type, payload) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, type, ...payload });
    });
  }

  /**
   * A request to the booted engine, sent when the worker has answered every earlier one; cancelled
   * (the worker restarted) when it has not answered within computeLimitMs of being sent: rejects
   * with EngineCancelled then.
   */
  call(type, payload) {
    return new Promise((resolve, reject) => {
      this.waiting.push({ type, payload, resolve, reject });
      this.sendNext();
    });
  }

  /** True while the worker has a request or one waits to be sent (tests wait for it to end). */
  get busy() {
    return this.sending !== null || this.waiting.length > 0;
  }

  async sendNext() {
    if (this.sending || this.waiting.length === 0) return;
    const request = this.waiting.shift();
    this.sending = request;
    try {
      await this.start(); // a restarted engine boots before the requests that waited are sent
      request.resolve(await this.sendWithinLimit(request.type, request.payload));
    } catch (error) {
      request.reject(error);
    } finally {
      this.sending = null;
      this.sendNext();
    }
  }

  async sendWithinLimit(type, payload) {
    const limitMs = this.computeLimitMs;
    let timer = null;
    const answer = this.post(type, payload);
    const expired = new Promise((_, reject) => {
      timer = setTimeout(() => {
        this.restart(cancelledMessage(limitMs));
        reject(new EngineCancelled(cancelledMessage(limitMs)));
      }, limitMs);
    });
    try {
      return await Promise.race([answer, expired]);
    } finally {
      clearTimeout(timer);
      answer.catch(() => {}); // rejected by the restart when it lost the race
    }
  }

  /** A message of the worker, heard at `at` (the page's clock; now unless it was kept meanwhile). */
  receive(message, at = performance.now()) {
    if (message.type === "timings") {
      // The worker's own clock of its stages (web/js/worker.js), on the page's timeline.
      for (const [stage, epochMs] of message.marks) {
        performance.mark(`trainmem:worker-${stage}`, { startTime: Math.max(0, epochMs - performance.timeOrigin) });
      }
      return;
    }
    if (message.type === "progress") {
      performance.mark(`trainmem:engine-${message.stage}`, { startTime: at }); // read by benchmarks/bench_site.py
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
   * `suggestions: false` leaves out the report's suggestions, which cost most of the time;
   * `reserveFraction` (with suggestions false) skips the CUDA allocator replay: the fast answer
   * (the reserve is that fraction of the allocated peak; see trainmem_web.compute).
   */
  async compute(setup, { suggestions = true, reserveFraction = null } = {}) {
    await this.start();
    const setupJson = JSON.stringify(setup);
    if (!suggestions) this.prefetchQueue = []; // a change: the old setup's neighbours can wait
    return new Promise((resolve) => {
      if (this.queued) this.queued.resolve({ superseded: true });
      this.queued = { setupJson, suggestions, reserveFraction, resolve };
      this.drain();
    });
  }

  /**
   * Estimate a setup outside the latest-request queue (the pinned setup of compare mode, the
   * Markdown report): never superseded; resolves to {ok, report | errors}.
   */
  async computeOnce(setup, { suggestions = false } = {}) {
    try {
      return JSON.parse(await this.call("compute", { setupJson: JSON.stringify(setup), suggestions }));
    } catch (error) {
      return failedAnswer(error);
    }
  }

  /** A report (an object) as Markdown, by the core's trainmem.render_markdown. */
  async markdown(report, title = "") {
    return this.call("markdown", { reportJson: JSON.stringify(report), title });
  }

  /** Report B against report A (objects) as the core's Markdown comparison (trainmem.compare). */
  async compareMarkdown(a, b, aLabel, bLabel) {
    return this.call("compareMarkdown", { aJson: JSON.stringify(a), bJson: JSON.stringify(b), aLabel, bLabel });
  }

  /**
   * Read trainer files ({filename: text}) against the form's full setup: resolves to the bridge's
   * answer, {ok, mode, setup, kept_from_form, keys} or {ok: false, errors} (trainmem_web.read_files).
   */
  async readFiles(files, formSetup) {
    try {
      return JSON.parse(await this.call("readFiles", { filesJson: JSON.stringify(files), formJson: JSON.stringify(formSetup) }));
    } catch (error) {
      return failedAnswer(error);
    }
  }

  /** A setup as a trainer's file (deepspeed, accelerate, axolotl, trl): {ok, filename, text, notes} or {ok: false, errors}. */
  async writeFile(setup, format) {
    try {
      return JSON.parse(await this.call("writeFile", { setupJson: JSON.stringify(setup), format }));
    } catch (error) {
      return failedAnswer(error);
    }
  }

  /** True while nothing is computing or waiting (the page asks for suggestions only then). */
  get idle() {
    return !this.running && !this.queued;
  }

  async drain() {
    if (this.running || !this.queued) return;
    const { setupJson, suggestions, reserveFraction, resolve } = this.queued;
    this.queued = null;
    this.running = true;
    try {
      const answer = JSON.parse(await this.call("compute", { setupJson, suggestions, reserveFraction }));
      if (answer.ok && !suggestions && reserveFraction === null) this.keep(setupJson);
      resolve(answer);
    } catch (error) {
      resolve(failedAnswer(error));
    } finally {
      this.running = false;
      this.drain();
      this.drainPrefetch();
    }
  }

  /** Whether the engine keeps the replayed answer (no suggestions) of this setup: it answers at once. */
  hasAnswer(setup) {
    return this.kept.has(JSON.stringify(setup));
  }

  keep(setupJson) {
    this.kept.delete(setupJson); // the most recently used last, as trainmem_web._ANSWERS
    this.kept.set(setupJson, true);
    while (this.kept.size > ANSWERS_KEPT) this.kept.delete(this.kept.keys().next().value);
  }

  /**
   * Compute these setups (objects) ahead, one at a time and only while no request waits (a request
   * that comes meanwhile waits for at most the one prefetch in flight: Python cannot be interrupted);
   * replaces the setups still to prefetch. Their answers stay in the worker (trainmem_web.prefetch).
   */
  prefetch(setups) {
    this.prefetchQueue = setups.map((setup) => JSON.stringify(setup)).filter((text) => !this.kept.has(text));
    this.drainPrefetch();
  }

  async drainPrefetch() {
    if (this.prefetching || this.running || this.queued || !this.ready) return;
    const setupJson = this.prefetchQueue.shift();
    if (setupJson === undefined) return;
    this.prefetching = true;
    try {
      if (await this.call("prefetch", { setupJson })) this.keep(setupJson);
    } catch {
      // a prefetch is optional: a cancelled or failed one is dropped
    } finally {
      this.prefetching = false;
      if (this.onPrefetched) this.onPrefetched(this.prefetchQueue.length);
      this.drain();
      this.drainPrefetch();
    }
  }

  /** Which optional inputs a model takes (trainmem.model_inputs), or null (an invalid model, or cancelled). */
  async modelInputs(model) {
    try {
      const answer = JSON.parse(await this.call("modelInputs", { modelJson: JSON.stringify(model ?? null) }));
      return answer.ok ? answer.inputs : null;
    } catch (error) {
      if (error instanceof EngineCancelled) return null;
      throw error;
    }
  }

  /** The Architecture the core reads from a model spec, or null (also when it was cancelled). */
  async architecture(model) {
    try {
      const answer = JSON.parse(await this.call("architecture", { modelJson: JSON.stringify(model) }));
      return answer.ok ? answer.architecture : null;
    } catch (error) {
      if (error instanceof EngineCancelled) return null;
      throw error;
    }
  }
}

/** The worker web/js/early.js started with the page, once (a restarted engine boots its own). */
function takeEarlyWorker() {
  const early = globalThis.trainmemEarlyWorker;
  if (!early) return null;
  delete globalThis.trainmemEarlyWorker;
  return early.take ? early.take() : early; // take(): started now if it was waiting for the first frame
}

/** The answer of a compute that failed in the engine: cancelled after the limit, or an internal error. */
function failedAnswer(error) {
  if (error instanceof EngineCancelled) return { ok: false, cancelled: true, errors: [{ path: "", message: error.message }] };
  return { ok: false, errors: [{ path: "", message: `internal error: ${error.message}` }] };
}
