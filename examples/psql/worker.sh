#!/usr/bin/env bash
# Claim, "process" and complete jobs with psql, until none is due (or forever with --forever).
# Usage: worker.sh DSN [--forever]
set -euo pipefail
dsn=${1:?usage: worker.sh DSN [--forever]}
forever=${2:-}
worker_id="psql-$(hostname)-$$"
sql() { psql -X -q -At -F $'\t' -v ON_ERROR_STOP=1 -d "$dsn" "$@"; }

while true; do
    # One claim per round trip; each line is: job id, attempt, payload.
    jobs=$(sql -v w="$worker_id" <<'SQL'
select job_id, attempt, payload from pyjobq.job_claim(:'w', 10, 60);
SQL
    )
    if [[ -z $jobs ]]; then
        [[ $forever == --forever ]] || break
        sleep 1
        continue
    fi
    while IFS=$'\t' read -r job_id attempt payload; do
        echo "$worker_id: job $job_id attempt $attempt: $payload"
        # A lost lease (SQLSTATE JQ001) makes psql fail here: the job is someone else's now.
        sql -v w="$worker_id" -v id="$job_id" -v a="$attempt" >/dev/null <<'SQL' || echo "$worker_id: could not complete $job_id" >&2
select pyjobq.job_complete(:'id', :'w', :a, '{"ok": true}');
SQL
    done <<<"$jobs"
done
