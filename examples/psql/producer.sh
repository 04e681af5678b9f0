#!/usr/bin/env bash
# Enqueue COUNT jobs of type 1 (SEARCH) with psql.  Usage: producer.sh DSN [COUNT]
set -euo pipefail
dsn=${1:?usage: producer.sh DSN [COUNT]}
count=${2:-10}
for ((n = 1; n <= count; n++)); do
    psql -X -q -At -v ON_ERROR_STOP=1 -d "$dsn" -v n="$n" <<'SQL'
select job_id from pyjobq.job_enqueue(1, jsonb_build_object('query', 'item ' || :'n'));
SQL
done
