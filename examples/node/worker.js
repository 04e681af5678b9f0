// Claim, "process" and complete jobs until none is due (or forever with --forever).
// Usage: node worker.js postgresql://... [--forever]
import { hostname } from "node:os";
import pg from "pg";

const [dsn, mode] = process.argv.slice(2);
const workerId = `node-${hostname()}-${process.pid}`;
const client = new pg.Client({ connectionString: dsn });
await client.connect();

for (;;) {
  const { rows: jobs } = await client.query(
    "select job_id, attempt, lease_token, payload from pyjobq.job_claim($1, 10, 60)",
    [workerId],
  );
  if (jobs.length === 0) {
    if (mode !== "--forever") break;
    await new Promise((resolve) => setTimeout(resolve, 1000));
    continue;
  }
  for (const job of jobs) {
    console.log(`${workerId}: job ${job.job_id} attempt ${job.attempt}: ${JSON.stringify(job.payload)}`);
    try {
      // The lease token is the claim's secret: only this holder can finish the job with it.
      await client.query("select pyjobq.job_complete($1, $2, $3, $4, $5)", [
        job.job_id, workerId, job.attempt, JSON.stringify({ ok: true }), job.lease_token,
      ]);
    } catch (error) {
      // JQ001: the lease was lost and the job runs elsewhere; anything else is a real failure.
      if (error.code !== "JQ001") throw error;
      console.error(`${workerId}: lost ${job.job_id}; it runs elsewhere`);
    }
  }
}
await client.end();
