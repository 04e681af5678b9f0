-- Tables for the raw-SQL ceiling: what PostgreSQL itself allows on this
-- cluster for the statements a job queue cannot avoid. The runner loads this
-- into a fresh database, then fills the tables (see bench/ceilings.py).

-- (a) one row per key, updated in place by primary key
create table ceiling_counter (
    id int primary key,
    n bigint not null default 0
);

-- (b) the simplest queue that is still a queue: claim one pending row with
-- SKIP LOCKED in one transaction, mark it done in the next
create table ceiling_job (
    id bigint generated always as identity primary key,
    state text not null default 'pending',
    payload jsonb not null default '{}',
    claimed_at timestamptz,
    done_at timestamptz
);

-- the claim walks this index in id order; only pending rows are in it
create index ceiling_job_pending_idx on ceiling_job (id) where state = 'pending';
