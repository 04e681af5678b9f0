// Command-line contract shared by the node drivers in bench/peers; the same
// contract as contract.py (read its docstring): the database comes from the
// libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE), the command is one of
// `setup`, `enqueue N [C]`, `drain N W [S]`, `latency K [W [D]]`, and the last
// stdout line is one JSON object.

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";

const nodeDir = join(dirname(fileURLToPath(import.meta.url)), "..", "node");

// Packages live in bench/node (installed by bench/setup), not beside the drivers.
export const require = createRequire(join(nodeDir, "package.json"));

export function packageVersion(name) {
  const manifest = join(nodeDir, "node_modules", name, "package.json");
  return JSON.parse(readFileSync(manifest, "utf8")).version;
}

// What this run asks besides N and W (set by main from the command line): how
// long a drain's handler sleeps, how far apart latency probes are enqueued.
export const settings = { handlerSleepMs: 0, latencySpacingMs: 20 };

// A drain handler's work: nothing, or a sleep of settings.handlerSleepMs.
export async function work() {
  if (settings.handlerSleepMs > 0) await sleep(settings.handlerSleepMs);
}

export const LATENCY_TIMEOUT_MS = 15000;
export const LATENCY_WARMUP = 10;
export const CONFIRM_POLL_MS = 10;
export const CONFIRM_TIMEOUT_MS = 60000;

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
export const now = () => performance.now();

export function log(message) {
  process.stderr.write(`${message}\n`);
}

// Connection settings for node-postgres, taken from the libpq environment so
// that a unix-socket host works too.
export function pgConfig(extra = {}) {
  const env = process.env;
  return {
    host: env.PGHOST,
    port: env.PGPORT ? Number(env.PGPORT) : undefined,
    user: env.PGUSER,
    password: env.PGPASSWORD,
    database: env.PGDATABASE,
    ...extra,
  };
}

function percentile(sorted, q) {
  const rank = Math.max(1, Math.ceil((q / 100) * sorted.length));
  return sorted[rank - 1];
}

function round(x, digits) {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

export function latencySummary(samples) {
  const got = samples.filter((s) => s !== null).sort((a, b) => a - b);
  if (got.length === 0) return { samples: samples.length, lost: samples.length };
  return {
    samples: samples.length,
    lost: samples.length - got.length,
    p50_ms: round(percentile(got, 50), 3),
    p99_ms: round(percentile(got, 99), 3),
    max_ms: round(got[got.length - 1], 3),
    mean_ms: round(got.reduce((a, b) => a + b, 0) / got.length, 3),
    latencies_ms: got.map((v) => round(v, 3)),
  };
}

// Clock bookkeeping for the latency scenario, on one monotonic clock.
export class Probes {
  constructor() {
    this.committed = new Map();
    this.started = new Map();
  }

  // The first statement of every handler: nothing may run before it.
  handlerStarted(probe) {
    if (!this.started.has(probe)) this.started.set(probe, now());
  }

  async run(k, enqueueOne) {
    for (let i = -LATENCY_WARMUP; i < 0; i++) await enqueueOne(i);
    await this.waitFor(-LATENCY_WARMUP, 0);
    let nextAt = now();
    for (let i = 0; i < k; i++) {
      const wait = nextAt - now();
      if (wait > 0) await sleep(wait);
      nextAt += settings.latencySpacingMs;
      await enqueueOne(i);
      this.committed.set(i, now());
    }
    await this.waitFor(0, k);
    const samples = [];
    for (let i = 0; i < k; i++) {
      samples.push(this.started.has(i) ? this.started.get(i) - this.committed.get(i) : null);
    }
    return samples;
  }

  async waitFor(from, to) {
    const deadline = now() + LATENCY_TIMEOUT_MS;
    for (;;) {
      let all = true;
      for (let i = from; i < to; i++) if (!this.started.has(i)) all = false;
      if (all) return;
      if (now() > deadline) {
        log(`latency: probes not served within ${LATENCY_TIMEOUT_MS}ms`);
        return;
      }
      await sleep(1);
    }
  }
}

// Poll the peer's own tables until n jobs show as done; return the count.
export async function confirm(countDone, n) {
  const deadline = now() + CONFIRM_TIMEOUT_MS;
  for (;;) {
    const done = await countDone();
    if (done >= n || now() > deadline) return done;
    await sleep(CONFIRM_POLL_MS);
  }
}

// driver: { setup(), enqueue(n) -> seconds of the bulk call, drain(n, w) -> {seconds, verified}, latency(k, w) -> [ms|null] };
// a drain's handlers await work().
export async function main(driver) {
  const [command, ...rest] = process.argv.slice(2);
  const ints = rest.map((x) => Number(x));
  let result;
  if (command === "setup") {
    result = await driver.setup();
  } else if (command === "enqueue" && (ints.length === 1 || ints.length === 2)) {
    const [n, chunk = n] = ints;
    let seconds = 0;
    for (let start = 0; start < n; start += chunk) {
      seconds += await driver.enqueue(Math.min(chunk, n - start));
    }
    result = { jobs: n, chunk, seconds: round(seconds, 4), jobs_per_s: round(n / seconds, 1) };
  } else if (command === "drain" && (ints.length === 2 || ints.length === 3)) {
    const [n, w, sleepMs = 0] = ints;
    settings.handlerSleepMs = sleepMs;
    const { seconds, verified } = await driver.drain(n, w);
    result = {
      jobs: n,
      workers: w,
      sleep_ms: sleepMs,
      seconds: round(seconds, 4),
      jobs_per_s: round(n / seconds, 1),
      verified,
    };
  } else if (command === "latency" && ints.length >= 1 && ints.length <= 3) {
    const [k, w = 1, spacingMs = 20] = ints;
    settings.latencySpacingMs = spacingMs;
    result = { workers: w, spacing_ms: spacingMs, ...latencySummary(await driver.latency(k, w)) };
  } else {
    log("usage: setup | enqueue N [C] | drain N W [S] | latency K [W [D]]");
    process.exit(2);
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
  // Some peers keep timers alive after stopping; the answer is out, so leave.
  process.exit(0);
}
