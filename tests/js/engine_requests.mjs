// The page's Engine (web/js/engine.js) against a fake worker: one request in the worker at a time,
// a request past the limit cancelled alone (those waiting behind it go to the restarted worker), the
// limit read when a request is sent, the latest-request queue of compute().
// Run by tests/test_web_engine_requests.py:  node tests/js/engine_requests.mjs

import assert from "node:assert/strict";

const workers = [];

/** A worker that answers after a delay per request: `slow` setups take 300 ms, everything else 5 ms. */
class FakeWorker {
  constructor() {
    this.listeners = { message: [], error: [] };
    this.terminated = false;
    this.inWorker = 0;
    this.mostAtOnce = 0;
    this.seen = [];
    workers.push(this);
  }
  addEventListener(type, listener) {
    this.listeners[type].push(listener);
  }
  postMessage(message) {
    this.seen.push(message);
    this.inWorker += 1;
    this.mostAtOnce = Math.max(this.mostAtOnce, this.inWorker);
    const slow = String(message.setupJson || "").includes("slow");
    setTimeout(() => {
      this.inWorker -= 1;
      if (this.terminated) return;
      const result = message.type === "boot" ? { seconds: 0, failures: [] } : JSON.stringify({ ok: true, report: { asked: message.setupJson } });
      for (const listener of this.listeners.message) listener({ data: { id: message.id, result } });
    }, slow ? 300 : 5);
  }
  terminate() {
    this.terminated = true;
  }
}
globalThis.Worker = FakeWorker;

const { Engine } = await import(new URL("../../web/js/engine.js", import.meta.url));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const newEngine = () => new Engine({ workerUrl: "worker.js", wheels: [], modules: [], python: {} });

// 1. A request past the limit is cancelled alone; the one waiting behind it is answered by the new worker.
{
  workers.length = 0;
  const engine = newEngine();
  await engine.start();
  engine.computeLimitMs = 50;
  const slow = engine.computeOnce({ name: "slow" });
  const behind = engine.computeOnce({ name: "quick" });
  const [slowAnswer, behindAnswer] = await Promise.all([slow, behind]);
  assert.equal(slowAnswer.cancelled, true);
  assert.match(slowAnswer.errors[0].message, /longer than 50 ms/);
  assert.equal(behindAnswer.ok, true, JSON.stringify(behindAnswer));
  assert.equal(JSON.parse(behindAnswer.report.asked).name, "quick");
  assert.equal(engine.restarts, 1);
  assert.equal(workers.length, 2);
  assert.equal(workers[0].seen.filter((m) => m.type === "compute").length, 1, "the waiting request was not sent to the stuck worker");
  assert.equal(engine.busy, false);
}

// 2. One request in the worker at a time, answered in order.
{
  workers.length = 0;
  const engine = newEngine();
  const answers = await Promise.all([1, 2, 3, 4].map((n) => engine.computeOnce({ n })));
  assert.deepEqual(answers.map((a) => JSON.parse(a.report.asked).n), [1, 2, 3, 4]);
  assert.equal(workers[0].mostAtOnce, 1);
}

// 3. The limit is the one in force when a request is sent: a request that waited behind a cancelled one
//    while the limit was raised is not cancelled under the old limit.
{
  workers.length = 0;
  const engine = newEngine();
  await engine.start();
  engine.computeLimitMs = 1;
  const cancelled = engine.computeOnce({ name: "slow" });
  await sleep(0);
  const later = engine.computeOnce({ name: "slow, but allowed" });
  engine.computeLimitMs = 10_000;
  assert.equal((await cancelled).cancelled, true);
  const answer = await later;
  assert.equal(answer.ok, true, JSON.stringify(answer));
  assert.equal(engine.restarts, 1);
}

// 4. compute() answers the latest request: a queued one replaced while another runs is superseded.
{
  workers.length = 0;
  const engine = newEngine();
  await engine.start();
  const first = engine.compute({ n: 1, slow: true }, { suggestions: false });
  await sleep(0);
  const replaced = engine.compute({ n: 2 }, { suggestions: false });
  const latest = engine.compute({ n: 3 }, { suggestions: false });
  assert.equal((await replaced).superseded, true);
  assert.equal(JSON.parse((await first).report.asked).n, 1);
  assert.equal(JSON.parse((await latest).report.asked).n, 3);
  assert.equal(engine.idle, true);
}

// 5. A worker that fails to boot fails the requests waiting for it (none hangs).
{
  class BrokenWorker extends FakeWorker {
    postMessage(message) {
      setTimeout(() => {
        for (const listener of this.listeners.error) listener({ message: "no WebAssembly here" });
      }, 1);
    }
  }
  globalThis.Worker = BrokenWorker;
  const engine = newEngine();
  const answer = await engine.computeOnce({ n: 1 });
  assert.equal(answer.ok, false);
  assert.match(answer.errors[0].message, /no WebAssembly here/);
  globalThis.Worker = FakeWorker;
}

console.log("engine_requests: ok");
