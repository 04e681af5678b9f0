// A Node.js worker pool for tests/test_cross_client.py: CLIENTS connections
// (from the PG* environment variables), each claiming up to 10 jobs at a time
// and completing them, until a claim comes back empty. Waits for a line on
// stdin before the first claim so that it starts together with the Python
// side, and prints one JSON object: the (job_id, attempt) pairs it claimed.
//
// Usage: node cross-client-worker.js CLIENTS

import { createInterface } from "node:readline";
import pg from "pg";

const clients = Number(process.argv[2] ?? 4);

async function work(client, workerId, claimed) {
  for (;;) {
    const { rows } = await client.query(
      "select job_id, attempt, lease_token from pyjobq.job_claim($1, 10)",
      [workerId],
    );
    if (rows.length === 0) return;
    for (const job of rows) {
      claimed.push([job.job_id, job.attempt]);
      await client.query("select pyjobq.job_complete($1, $2, $3, $4, $5)", [
        job.job_id,
        workerId,
        job.attempt,
        JSON.stringify({ by: workerId }),
        job.lease_token,
      ]);
    }
  }
}

async function main() {
  const pool = [];
  for (let i = 0; i < clients; i += 1) {
    const client = new pg.Client();
    await client.connect();
    pool.push(client);
  }
  console.log("ready");
  const stdin = createInterface({ input: process.stdin });
  await new Promise((resolve) => stdin.once("line", resolve));
  stdin.close();
  const claimed = [];
  await Promise.all(pool.map((client, i) => work(client, `node-${i}`, claimed)));
  await Promise.all(pool.map((client) => client.end()));
  console.log(JSON.stringify({ claimed }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
