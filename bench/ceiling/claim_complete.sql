-- (b) one job: claim the oldest pending row (one transaction), then mark it
-- done (a second transaction). Run with -t so that clients x transactions
-- equals the number of pending rows: every claim then finds a row.
with next as (
    select j.id
    from ceiling_job as j
    where j.state = 'pending'
    order by j.id
    limit 1
    for update skip locked
)
update ceiling_job as j
set state = 'running', claimed_at = now()
from next
where j.id = next.id
returning j.id
\gset
update ceiling_job set state = 'done', done_at = now() where id = :id;
