-- depends: 0052_snooze_count

-- Schema 53: a snooze. A handler puts its job back to sleep for a while
-- (job_finish_many's outcome snoozed): PENDING again, its try given back and
-- counted in the job's snoozes (schema 52), which each type bounds
-- (job_type_set_snoozes).

-- A constant default: a change of the catalog, no rewrite.
alter table pyjobq.job_type add column max_snoozes int not null default 1000;

drop function pyjobq.job_type_policies();

comment on type pyjobq.job_end is
  'How one attempt ends, as _finish takes it: the job, the attempt and lease token its holder names (any token '
  'when null), the outcome (done, failed, dead, released, snoozed, expired or cancelled), the result of a done '
  'attempt, the error of a failed or cancelled one, the delay before its retry (null: the type''s backoff) or '
  'the end of its snooze (null: now), and the '
  'parents a cancelled one still waited for (null: as the row says).';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 53
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq.job_type_set_snoozes(p_job_type int, p_max_snoozes int)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
begin
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_range('p_max_snoozes', p_max_snoozes, 0, 10000);
  update pyjobq.job_type t
     set max_snoozes = p_max_snoozes
   where t.job_type = p_job_type;
end;
$$;

comment on function pyjobq.job_type_set_snoozes(int, int) is
  'Sets how many times a job of type p_job_type may snooze (0..10000; 1000 by default): the snooze past that '
  'makes it DEAD instead. Applies to the snoozes from the commit on.';

create or replace function pyjobq.job_type_policies()
returns table (
  job_type int,
  name text,
  max_attempts int,
  backoff_base_seconds double precision,
  backoff_cap_seconds double precision,
  backoff_jitter double precision,
  timeout_seconds double precision,
  keep_done boolean,
  max_snoozes int
)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select t.job_type::int, t.name::text, coalesce(t.max_attempts, 3)::int,
         coalesce(t.backoff_base_seconds, 2), coalesce(t.backoff_cap_seconds, 3600),
         coalesce(t.backoff_jitter, 0.25), t.timeout_seconds, t.keep_done, t.max_snoozes
    from pyjobq.job_type t
   order by t.job_type
$$;

comment on function pyjobq.job_type_policies() is
  'Each registered job type''s retry policy as it applies, defaults filled in: max_attempts, backoff base, '
  'cap and jitter, the deadline of an attempt in seconds from its claim, whether its DONE jobs are kept in '
  'job_history (job_type_set_history), and how many times a job may snooze (job_type_set_snoozes).';

create or replace function pyjobq._end_status(p_job pyjobq.job, p_outcome text)
returns smallint
language sql
immutable
begin atomic
  select case p_outcome
           when 'done' then 3
           when 'dead' then 4
           when 'cancelled' then 5
           else case when pyjobq._tries_left(p_job.attempts,
                                             p_job.attempts_refunded + (p_outcome in ('released', 'snoozed'))::int,
                                             p_job.max_attempts) > 0
                     then 1 else 4 end
         end::smallint;
end;

comment on function pyjobq._end_status(pyjobq.job, text) is
  'The status outcome p_outcome gives the RUNNING job p_job: 3 for done, 4 for dead, 5 for cancelled; for '
  'failed, expired, released and snoozed 1 (PENDING) with tries left, else 4.';

create or replace function pyjobq._finish(p_worker_id text, p_ends pyjobq.job_end[], p_now timestamptz,
                               p_denied smallint[], p_follow boolean default true)
returns table (ord int, job_id uuid, attempt int, job_type smallint, status smallint, run_after timestamptz,
               followed boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
-- One statement for the batch, its plan pinned: input rows on the outside, each
-- job found by its primary key (the only index the predicates allow),
-- whatever the statistics say. The penalties of the disabled methods would
-- otherwise tip the plan into JIT compilation.
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
set plan_cache_mode = force_generic_plan
as $$
begin
  return query
  with input as (
    -- An attempt named twice ends once, as its first mention says.
    select distinct on (e.job_id, e.attempt) e.*
      from unnest(p_ends) with ordinality
           as e(job_id, attempt, lease_token, outcome, result, error, delay, waiting, ord)
     order by e.job_id, e.attempt, e.ord
  ), ended as (
    delete from pyjobq.job j
     using input i
     where j.job_id = i.job_id
       and (i.outcome = 'cancelled' or pyjobq._holds(j, p_worker_id, i.attempt, i.lease_token, p_denied))
       and pyjobq._end_status(j, i.outcome) <> 1
    returning i.ord, j as row, pyjobq._end_status(j, i.outcome) as status, i.outcome,
              case when i.outcome = 'done' then i.result else j.result end as result,
              case i.outcome
                when 'done' then j.last_error
                when 'cancelled' then coalesce(i.error, j.last_error, 'cancelled')
                when 'released' then 'released with its claim counter spent (32767 claims)'
                when 'snoozed' then 'snoozed with its claim counter spent (32767 claims)'
                else left(i.error, 10000)
              end as error,
              coalesce(i.waiting, j.waiting_on) as waiting
  ), retried as (
    update pyjobq.job j
       set status = 1,
           -- A release puts the job back at its old place in the queue, before
           -- claim fronts, and gives its try back; a snooze gives it back too
           -- and sleeps its delay; a failure waits its backoff.
           run_after = case when i.outcome = 'released' then pyjobq._pending_from(j.run_after, p_now, false)
                            when i.outcome = 'snoozed'
                            then pyjobq._pending_from(p_now + coalesce(i.delay, interval '0'), p_now, false)
                            else pyjobq._retry_at(j.job_type, j.attempts - j.attempts_refunded, i.delay, p_now)
                       end,
           attempts_refunded = j.attempts_refunded + (i.outcome in ('released', 'snoozed'))::int,
           snoozes = j.snoozes + (i.outcome = 'snoozed')::int,
           last_error = case when i.outcome in ('released', 'snoozed') then j.last_error
                             else left(i.error, 10000) end,
           worker_id = null,
           lease_until = null,
           updated_at = p_now
      from input i
     where i.outcome in ('failed', 'expired', 'released', 'snoozed')
       and j.job_id = i.job_id
       and pyjobq._holds(j, p_worker_id, i.attempt, i.lease_token, p_denied)
       and pyjobq._end_status(j, i.outcome) = 1
    returning i.ord, j.job_id, j.attempts, j.job_type, j.status, j.run_after, i.outcome
  ), moved as (
    select d.ord, (d.row).job_id, (d.row).attempts, (d.row).job_type, d.status, (d.row).run_after, d.outcome,
           true as ends, d.row, d.result, d.error, d.waiting,
           (d.row).has_dependants or (d.row).batch_id is not null as followed
      from ended d
    union all
    select r.ord, r.job_id, r.attempts, r.job_type, r.status, r.run_after, r.outcome,
           false, null, null, null, null, false
      from retried r
  ), followed as (
    -- One row (an aggregate), so that each follow-up runs once for the call,
    -- in this order: the ended rows into the history, the finish counts (what
    -- a holder or the reaper ended or failed, and a release or a snooze only
    -- when it made the job DEAD), then what follows the ends of parents and batch members,
    -- which reads the history; and each type's retries announced once. The
    -- worker that lost its lease is not the one that ended the job: it gets
    -- JQ001 (lease_lost) later, never JQ003.
    select pyjobq._to_history(array_agg(m.row) filter (where m.ends),
                              array_agg(m.status) filter (where m.ends), p_now,
                              case when bool_or(m.outcome = 'done')
                                   then array_agg(m.result) filter (where m.ends) end,
                              case when bool_or(m.outcome <> 'done')
                                   then array_agg(m.error) filter (where m.ends) end,
                              case when bool_or(m.outcome = 'cancelled')
                                   then array_agg(m.waiting) filter (where m.ends) end,
                              case when bool_or(m.outcome = 'expired')
                                   then array_agg(m.outcome = 'expired') filter (where m.ends) end),
           pyjobq._stat_add(p_now, p_worker_id,
                            array_agg(m.job_type) filter (where m.outcome <> 'cancelled'
                                                            and (m.outcome not in ('released', 'snoozed')
                                                                 or m.status = 4)),
                            array_agg(m.status) filter (where m.outcome <> 'cancelled'
                                                          and (m.outcome not in ('released', 'snoozed')
                                                               or m.status = 4))),
           case when p_follow and bool_or(m.followed)
                then pyjobq._ended(array_agg(m.job_id) filter (where m.followed), p_now) end,
           (select count(pyjobq._announce(r.job_type, r.due, p_now))
              from (select r.job_type, min(r.run_after) as due from retried r group by r.job_type) r)
      from moved m
  )
  select m.ord::int, m.job_id, m.attempts::int, m.job_type, m.status, m.run_after, m.followed
    from moved m
   cross join followed;
end;
$$;

comment on function pyjobq._finish(text, pyjobq.job_end[], timestamptz, smallint[], boolean) is
  'Ends the attempts p_ends that p_worker_id (any worker when null) holds, of types outside p_denied, as their '
  'outcomes say (a cancelled one whatever its status): DONE, DEAD or CANCELLED into the history, or PENDING '
  'again; counts them in job_stat, follows up dependants and batches (unless p_follow is false: the cascade '
  'follows up its own, a generation at a time), announces retries. Returns one row per attempt it moved, with '
  'its position in p_ends, its new status and whether its end is to be followed up.';

create or replace function pyjobq.job_finish_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_outcomes text[],
  p_results jsonb[] default null,
  p_errors text[] default null,
  p_retry_delays_seconds double precision[] default null,
  p_lease_tokens uuid[] default null
)
returns table (job_id uuid, status int, run_after timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_count int := coalesce(cardinality(p_job_ids), 0);
  v_bad int;
begin
  select c.p_job_ids, c.p_attempts, c.p_lease_tokens
    into p_job_ids, p_attempts, p_lease_tokens
    from pyjobq._check_held_batch(p_job_ids, p_attempts, p_lease_tokens, p_worker_id) c;
  p_outcomes := pyjobq._check_array('p_outcomes', p_outcomes);
  perform pyjobq._check_same_length('p_outcomes', coalesce(cardinality(p_outcomes), 0), v_count);
  -- Null: none given; else one, possibly null, per job.
  if p_results is not null then
    p_results := pyjobq._check_array('p_results', p_results);
    perform pyjobq._check_same_length('p_results', cardinality(p_results), v_count);
  end if;
  if p_errors is not null then
    p_errors := pyjobq._check_array('p_errors', p_errors);
    perform pyjobq._check_same_length('p_errors', cardinality(p_errors), v_count);
  end if;
  if p_retry_delays_seconds is not null then
    p_retry_delays_seconds := pyjobq._check_array('p_retry_delays_seconds', p_retry_delays_seconds);
    perform pyjobq._check_same_length('p_retry_delays_seconds', cardinality(p_retry_delays_seconds), v_count);
    v_bad := array_position(array(select d is null or d between 0 and 31536000
                                    from unnest(p_retry_delays_seconds) d), false);
    if v_bad is not null then
      raise exception 'p_retry_delays_seconds[%] must be between 0 and 31536000', v_bad
        using errcode = '22023',
              detail = format('p_retry_delays_seconds[%s] was %s.', v_bad, p_retry_delays_seconds[v_bad]),
              hint = 'Leave it null for the default exponential backoff.';
    end if;
  end if;
  if not (p_outcomes <@ array['done', 'failed', 'dead', 'snoozed'] and array_position(p_outcomes, null) is null) then
    v_bad := array_position(array(select o is not null and o in ('done', 'failed', 'dead', 'snoozed')
                                    from unnest(p_outcomes) o), false);
    raise exception 'p_outcomes[%] must be done, failed, dead or snoozed', v_bad
      using errcode = '22023',
            detail = format('p_outcomes[%s] was %s.', v_bad, coalesce(quote_literal(p_outcomes[v_bad]), 'null')),
            hint = 'done completes the attempt; failed retries the job while it has tries left; dead ends it; '
                   'snoozed puts it back to sleep for its delay, its try given back.';
  end if;
  -- A snooze past its type's bound (job_type_set_snoozes) ends the job DEAD,
  -- saying why. Read before the move: only the holder changes the count.
  if 'snoozed' = any (p_outcomes) then
    select array_agg(case when s.spent then 'dead' else u.outcome end order by u.ord),
           array_agg(case when s.spent
                          then format('snoozed %s times, the most its type allows (job_type_set_snoozes)',
                                      s.snoozes)
                          else p_errors[u.ord] end order by u.ord)
      into p_outcomes, p_errors
      from unnest(p_job_ids, p_outcomes) with ordinality as u(id, outcome, ord)
      left join lateral (select j.snoozes, j.snoozes >= t.max_snoozes as spent
                           from pyjobq.job j
                           join pyjobq.job_type t on t.job_type = j.job_type
                          where j.job_id = u.id
                            and u.outcome = 'snoozed') s on true;
  end if;

  return query
  with finished as materialized (
    select f.job_id, f.attempt, f.status, f.run_after
      from pyjobq._finish(p_worker_id,
                          array(select row(u.id, u.attempt, u.token, u.outcome, u.result, u.error,
                                           make_interval(secs => u.delay), null)::pyjobq.job_end
                                  from unnest(p_job_ids, p_attempts, p_lease_tokens, p_outcomes, p_results,
                                              p_errors, p_retry_delays_seconds)
                                       with ordinality as u(id, attempt, token, outcome, result, error, delay, ord)
                                 order by u.ord),
                          v_now, v_denied) f
  )
  -- An attempt this holder ended before (a retried call whose first reply was
  -- lost) is reported as it ended then, and stays as it is.
  select i.id,
         coalesce(f.status, pyjobq._ended_by(i.id, p_worker_id, i.attempt, i.token, v_denied))::int,
         f.run_after
    from unnest(p_job_ids, p_attempts, p_lease_tokens) with ordinality as i(id, attempt, token, ord)
    left join finished f on f.job_id = i.id and f.attempt = i.attempt
   order by i.ord;
end;
$$;

comment on function pyjobq.job_finish_many(text, uuid[], int[], text[], jsonb[], text[], double precision[], uuid[]) is
  'Ends up to 10000 attempts that p_worker_id holds, each with the lease token at its position in '
  'p_lease_tokens, as the outcome at its position in p_outcomes says: done (DONE with its p_results element), '
  'failed (its p_errors element, truncated to 10000 characters, as last_error; PENDING again after its '
  'p_retry_delays_seconds element (0..31536000) or the type''s backoff while tries are left, else DEAD), dead '
  '(DEAD at once) or snoozed (PENDING again after its p_retry_delays_seconds element, 0 when null, the try given '
  'back and counted in snoozes; DEAD once the type''s max_snoozes are spent, job_type_set_snoozes). Returns every input job id in input order with its new status (1 PENDING, 3 DONE, 4 DEAD) and '
  'run_after, or a null status for a job no longer held (left unchanged); an attempt this holder already ended '
  '(retrying after a lost reply is safe) is reported with the status it ended in. A retry notifies pyjobq_job '
  'as job_enqueue does.';

insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_type_set_snoozes(int, int)', '{pyjobq_admin}');

do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
