-- The limited claim -----------------------------------------------------------
--
-- Concurrency and rate limits. A claim that may take jobs of a type with a
-- limit (job_type_set_limits) walks the due jobs in claim order and takes a
-- job only while its type, and its concurrency key, have room. Room is counted
-- under a transaction-level advisory lock, so that no two claims count the
-- same room: for the type, taken for every type with a limit on its whole up
-- front in type order (never in a cycle); for a key, tried as the walk
-- reaches it, and a key another claim holds has no room for this one (it
-- takes the key's jobs next time). A type lock another claim holds is waited
-- for, but 50 ms at most in all, whatever the number of types: a claim
-- committed in the usual few milliseconds lets the next one through, and one
-- left open (a client claiming inside a long transaction, a paused debugger)
-- costs the others 50 ms and that type's jobs until it ends; their claims take
-- every other type's. Locks are in the two-integer space: (1887005297, type)
-- for a type, (-type, hashtext(key)) for a key.
--
-- The RUNNING jobs are counted with the statement's snapshot, taken after the
-- lock: only READ COMMITTED gives each statement its own. Under REPEATABLE
-- READ or SERIALIZABLE the count would be the transaction's first snapshot's,
-- which may predate claims committed since, so such a claim of a type with a
-- concurrency limit is refused (JQ007) rather than let past its limit.
--
-- RUNNING jobs are counted: every way out of RUNNING only frees room, so a
-- count read under the lock can only be high. Claims are counted in a sliding
-- window (pyjobq.rate_window): at most N claims in any period T, an exact
-- bound where a fixed window lets 2N through across its edge and a token
-- bucket lets a full bucket and its refill through within one period. The
-- claim's time is its clock, or the latest time its type windows hold if
-- later (a claim that waited for the lock can start before the one it waited
-- for), so times only grow along each window and entries older than T can
-- go; a key window holding a later time than that has no room for this claim.
-- Its jobs start at that time (run_started_at), the time the windows count.
-- Claims of types without limits never come here.
create function pyjobq._claim_limited(
  p_worker_id text,
  p_types smallint[],
  p_limit int,
  p_lease int,
  p_now timestamptz
)
returns table (
  job_id uuid,
  job_type int,
  priority int,
  payload jsonb,
  attempt int,
  max_attempts int,
  dedupe_key text,
  run_after timestamptz,
  lease_until timestamptz,
  created_at timestamptz,
  lease_token uuid,
  metadata jsonb,
  parent_results jsonb
)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set enable_sort = off
set jit = off
-- Nothing but a type lock is waited for (below), and that 50 ms at most.
set lock_timeout = '100ms'
as $$
declare
  c_visits constant int := 10000;  -- due jobs a claim looks at, at most
  c_lock_wait constant interval := '50 milliseconds';  -- for type locks, in all
  v_waited_until timestamptz := clock_timestamp() + c_lock_wait;
  v_busy smallint[] := '{}';       -- types another claim holds: not claimed this time
  v_at timestamptz := p_now;       -- the claim's time
  v_type record;
  v_room jsonb := '{}';            -- room left, by "type" and "type/key", once counted
  v_keyed jsonb := '{}';           -- key limits, by "type": {max, rate, period}
  v_taken jsonb := '{}';           -- jobs taken, by "type" and "type/key", where a rate counts them
  v_rule jsonb;
  v_w record;
  v_plain refcursor;
  v_fair refcursor;
  v_p record;
  v_f record;
  v_p_found boolean;
  v_f_found boolean;
  v_fair_turn boolean := true;
  v_c record;
  v_key text;
  v_row record;
  v_claimed int := 0;
  v_ids uuid[];
  v_mine text[];
begin
  if current_setting('transaction_isolation') <> 'read committed'
     and exists (select from pyjobq.job_type t
                  where t.job_type = any (p_types)
                    and (t.max_running is not null or t.key_max_running is not null)) then
    raise exception 'job_claim of a type with a concurrency limit needs READ COMMITTED, not %',
                    upper(current_setting('transaction_isolation'))
      using errcode = 'JQ007',
            detail = 'Under it the RUNNING jobs would be counted with the transaction''s first snapshot, '
                     'which misses claims committed since.',
            hint = 'Claim in a transaction of its own, or at READ COMMITTED.';
  end if;
  for v_type in
    select t.job_type, t.max_running, t.rate_limit
      from pyjobq.job_type t
     where t.job_type = any (p_types)
       and (t.max_running is not null or t.rate_limit is not null)
     order by t.job_type
  loop
    if not pg_try_advisory_xact_lock(1887005297, v_type.job_type) then
      begin
        perform set_config('lock_timeout',
                           greatest(1, ceil(extract(epoch from v_waited_until - clock_timestamp()) * 1000))::text
                             || 'ms', true);
        perform pg_advisory_xact_lock(1887005297, v_type.job_type);
        perform set_config('lock_timeout', '100ms', true);
      exception when lock_not_available then
        v_busy := v_busy || v_type.job_type;
        continue;
      end;
    end if;
    if v_type.rate_limit is not null then
      -- A statement of its own: its snapshot follows the lock.
      v_at := greatest(v_at, (select w.claimed_at[cardinality(w.claimed_at)]
                                from pyjobq.rate_window w
                               where w.job_type = v_type.job_type and w.concurrency_key = ''));
    end if;
  end loop;
  p_types := array(select t from unnest(p_types) t where t <> all (v_busy));

  for v_type in
    select t.job_type, t.max_running, t.key_max_running, t.rate_limit, t.rate_period, t.key_rate_limit,
           t.key_rate_period, w.claimed_at, w.claimed
      from pyjobq.job_type t
      left join pyjobq.rate_window w on w.job_type = t.job_type and w.concurrency_key = ''
     where t.job_type = any (p_types)
  loop
    if v_type.max_running is not null then
      v_room := v_room || jsonb_build_object(v_type.job_type::text, v_type.max_running - (
        select count(*)
          from (select 1
                  from pyjobq.job r
                 where r.lease_until is not null  -- RUNNING: job_running_has_lease
                   and r.job_type = v_type.job_type
                 limit v_type.max_running) as r));
    end if;
    if v_type.rate_limit is not null then
      v_room := v_room || jsonb_build_object(v_type.job_type::text, least(
        (v_room ->> v_type.job_type::text)::int,
        v_type.rate_limit - pyjobq._rate_used(v_type.claimed_at, v_type.claimed, v_at - v_type.rate_period)));
      v_taken := v_taken || jsonb_build_object(v_type.job_type::text, 0);
    end if;
    if v_type.key_max_running is not null or v_type.key_rate_limit is not null then
      v_keyed := v_keyed || jsonb_build_object(v_type.job_type::text, jsonb_build_object(
        'max', v_type.key_max_running, 'rate', v_type.key_rate_limit, 'period', v_type.key_rate_period));
    end if;
  end loop;

  -- No limit can bind within this claim: no key has one, no type is fair, and
  -- every limited type has room for all p_limit jobs. Then the claim is the
  -- plain one, set-based and resuming from the session's claim front, at the
  -- claim's time; the rates count what it took. (A type limit that never binds
  -- costs its lock and its count, not the walk below.)
  if v_keyed = '{}'
     and not exists (select from jsonb_each_text(v_room) r where r.value::int < p_limit)
     and not exists (select from pyjobq.job_type t where t.job_type = any (p_types) and t.fair_share) then
    for v_row in select * from pyjobq._claim_pick(p_worker_id, p_types, p_limit, p_lease, v_at) loop
      v_taken := pyjobq._count_down(v_taken, v_row.job_type::text, null);
      job_id := v_row.job_id;
      job_type := v_row.job_type;
      priority := v_row.priority;
      payload := v_row.payload;
      attempt := v_row.attempt;
      max_attempts := v_row.max_attempts;
      dedupe_key := v_row.dedupe_key;
      run_after := v_row.run_after;
      lease_until := v_row.lease_until;
      created_at := v_row.created_at;
      lease_token := v_row.lease_token;
      metadata := v_row.metadata;
      parent_results := v_row.parent_results;
      return next;
    end loop;
    perform pyjobq._rate_record_taken(v_taken, v_at);
    return;
  end if;

  -- Keys with a limit on their RUNNING jobs and nothing else in the way (no key
  -- rate, no fair share): the first due jobs, a few times what the claim wants,
  -- are taken in one pass. One statement tries their keys' locks; the next,
  -- whose snapshot follows the locks, counts the keys' RUNNING jobs, picks the
  -- jobs their key and type have room for, in claim order, and leases them.
  -- What the pass could not fill, the walk below takes on from the head (its
  -- counts see what the pass took).
  if v_keyed <> '{}'
     and not exists (select from jsonb_each(v_keyed) k where k.value ->> 'rate' is not null)
     and not exists (select from pyjobq.job_type t where t.job_type = any (p_types) and t.fair_share) then
    select array_agg(c.job_id order by c.ord),
           array_agg(distinct c.job_type || '/' || c.concurrency_key)
             filter (where case when c.concurrency_key is not null and v_keyed ? c.job_type::text
                                then pg_try_advisory_xact_lock(-c.job_type, hashtext(c.concurrency_key))
                                else false end)
      into v_ids, v_mine
      from (select d.job_id, d.job_type, d.concurrency_key, row_number() over () as ord
              from (select d.job_id, d.job_type, d.concurrency_key
                      from pyjobq.job d
                     where d.status = 1
                       and d.run_after <= p_now
                       and d.job_type = any (p_types)
                       and d.fair_rank is null
                     order by d.priority, d.run_after, d.seq
                     limit 4 * p_limit) d) c;
    for v_row in
      with cand as (
        select u.ord, j.job_id, j.job_type, j.concurrency_key,
               j.job_type || '/' || j.concurrency_key as key
          from unnest(v_ids) with ordinality u(job_id, ord)
          join pyjobq.job j on j.job_id = u.job_id and j.status = 1
      ),
      room as (
        select k.key, (v_keyed -> split_part(k.key, '/', 1) ->> 'max')::int - (
                 select count(*)
                   from pyjobq.job r
                  where r.status = 2
                    and r.concurrency_key is not null
                    and r.job_type = split_part(k.key, '/', 1)::smallint
                    and r.concurrency_key = substr(k.key, position('/' in k.key) + 1)) as left_
          from unnest(v_mine) k(key)
      ),
      by_key as (
        select c.*, row_number() over (partition by c.key order by c.ord) as nth
          from cand c
      ),
      keyed as (
        select b.*
          from by_key b
          left join room r on r.key = b.key
         where b.concurrency_key is null
            or not v_keyed ? b.job_type::text
            or b.nth <= r.left_
      ),
      typed as (
        select k.*, row_number() over (partition by k.job_type order by k.ord) as nth_of_type
          from keyed k
      ),
      picked as (
        select t.job_id
          from typed t
         where t.nth_of_type <= coalesce((v_room ->> t.job_type::text)::int, p_limit)
         order by t.ord
         limit p_limit
      ),
      locked as (
        select l.job_id from pyjobq.job l
         where l.job_id in (select p.job_id from picked p) and l.status = 1
           for update skip locked
      ),
      claimed as (
        update pyjobq.job j
           set status = 2,
               attempts = j.attempts + 1,
               worker_id = p_worker_id,
               lease_token = gen_random_uuid(),
               lease_until = v_at + make_interval(secs => least(p_lease, t.timeout_seconds)),
               run_started_at = v_at,
               updated_at = v_at
          from locked l, pyjobq.job_type t
         where j.job_id = l.job_id
           and t.job_type = j.job_type
        returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts, j.dedupe_key,
                  j.run_after, j.lease_until, j.created_at, j.lease_token, j.metadata,
                  case when j.waiting_on is not null then pyjobq._parent_results(j.job_id) end as parent_results,
                  j.seq
      )
      select c.* from claimed c order by c.priority, c.run_after, c.seq
    loop
      v_room := pyjobq._count_down(v_room, v_row.job_type::text, null);
      v_taken := pyjobq._count_down(v_taken, v_row.job_type::text, null);
      job_id := v_row.job_id;
      job_type := v_row.job_type;
      priority := v_row.priority;
      payload := v_row.payload;
      attempt := v_row.attempts;
      max_attempts := v_row.max_attempts;
      dedupe_key := v_row.dedupe_key;
      run_after := v_row.run_after;
      lease_until := v_row.lease_until;
      created_at := v_row.created_at;
      lease_token := v_row.lease_token;
      metadata := v_row.metadata;
      parent_results := v_row.parent_results;
      return next;
      v_claimed := v_claimed + 1;
    end loop;
    if v_claimed >= p_limit or coalesce(cardinality(v_ids), 0) < 4 * p_limit then
      perform pyjobq._rate_record_taken(v_taken, v_at);
      return;
    end if;
  end if;

  -- Two streams of due jobs: in claim order, and the fair-share jobs in their
  -- turns (job.fair_rank); the more urgent priority first, and taking turns
  -- within one.
  open v_plain for
    select c.job_id, c.job_type, c.concurrency_key, c.priority
      from pyjobq.job c
     where c.status = 1
       and c.run_after <= p_now
       and c.job_type = any (p_types)
       and c.fair_rank is null
     order by c.priority, c.run_after, c.seq
     limit c_visits;
  open v_fair for
    select c.job_id, c.job_type, c.concurrency_key, c.priority
      from pyjobq.job c
     where c.status = 1
       and c.fair_rank is not null
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.fair_rank, c.seq
     limit c_visits;
  fetch v_plain into v_p;
  v_p_found := found;
  fetch v_fair into v_f;
  v_f_found := found;
  loop
    if v_f_found and (not v_p_found or v_f.priority < v_p.priority
                      or (v_f.priority = v_p.priority and v_fair_turn)) then
      v_c := v_f;
      fetch v_fair into v_f;
      v_f_found := found;
      v_fair_turn := false;
    elsif v_p_found then
      v_c := v_p;
      fetch v_plain into v_p;
      v_p_found := found;
      v_fair_turn := true;
    else
      exit;
    end if;
    continue when (v_room ->> v_c.job_type::text)::int <= 0;
    v_key := null;
    v_rule := v_keyed -> v_c.job_type::text;
    if v_c.concurrency_key is not null and v_rule is not null then
      v_key := v_c.job_type || '/' || v_c.concurrency_key;
      if not v_room ? v_key then
        v_room := v_room || jsonb_build_object(v_key, 0);
        if pg_try_advisory_xact_lock(-v_c.job_type, hashtext(v_c.concurrency_key)) then
          v_room := v_room || jsonb_build_object(v_key, 100000);
          if v_rule ->> 'max' is not null then
            v_room := v_room || jsonb_build_object(v_key, (v_rule ->> 'max')::int - (
              select count(*)
                from (select 1
                        from pyjobq.job r
                       where r.status = 2
                         and r.concurrency_key is not null
                         and r.job_type = v_c.job_type
                         and r.concurrency_key = v_c.concurrency_key
                       limit (v_rule ->> 'max')::int) as r));
          end if;
          if v_rule ->> 'rate' is not null then
            select w.claimed_at, w.claimed into v_w
              from pyjobq.rate_window w
             where w.job_type = v_c.job_type and w.concurrency_key = v_c.concurrency_key;
            v_room := v_room || jsonb_build_object(v_key, case
              when v_w.claimed_at[cardinality(v_w.claimed_at)] > v_at then 0
              else least((v_room ->> v_key)::int, (v_rule ->> 'rate')::int
                         - pyjobq._rate_used(v_w.claimed_at, v_w.claimed, v_at - (v_rule ->> 'period')::interval))
              end);
            v_taken := v_taken || jsonb_build_object(v_key, 0);
          end if;
        end if;
      end if;
      continue when (v_room ->> v_key)::int <= 0;
    end if;
    update pyjobq.job j
       set status = 2,
           attempts = j.attempts + 1,
           worker_id = p_worker_id,
           lease_token = gen_random_uuid(),
           lease_until = v_at + make_interval(secs => least(p_lease, t.timeout_seconds)),
           run_started_at = v_at,
           updated_at = v_at
      from pyjobq.job_type t
     where j.job_id = (select l.job_id from pyjobq.job l where l.job_id = v_c.job_id and l.status = 1
                          for update skip locked)
       and t.job_type = j.job_type
    returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts, j.dedupe_key,
              j.run_after, j.lease_until, j.created_at, j.lease_token, j.metadata,
              case when j.waiting_on is not null then pyjobq._parent_results(j.job_id) end as parent_results
      into v_row;
    continue when not found;  -- another claimer has it
    v_room := pyjobq._count_down(v_room, v_c.job_type::text, v_key);
    v_taken := pyjobq._count_down(v_taken, v_c.job_type::text, v_key);
    job_id := v_row.job_id;
    job_type := v_row.job_type;
    priority := v_row.priority;
    payload := v_row.payload;
    attempt := v_row.attempts;
    max_attempts := v_row.max_attempts;
    dedupe_key := v_row.dedupe_key;
    run_after := v_row.run_after;
    lease_until := v_row.lease_until;
    created_at := v_row.created_at;
    lease_token := v_row.lease_token;
    metadata := v_row.metadata;
    parent_results := v_row.parent_results;
    return next;
    v_claimed := v_claimed + 1;
    exit when v_claimed >= p_limit;
  end loop;
  close v_plain;
  close v_fair;

  perform pyjobq._rate_record_taken(v_taken, v_at);
end;
$$;

comment on function pyjobq._claim_limited(text, smallint[], int, int, timestamptz) is
  'job_claim for job types with concurrency or rate limits or fair share: takes up to p_limit due PENDING jobs, '
  'in claim order and the fair-share ones in their turns, while their type and concurrency key have room, '
  'counted under advisory locks; looks at 10000 due jobs of each order at most. A type whose lock another claim '
  'holds for more than 50 ms is left out of this claim. Raises JQ007 for a type with a concurrency limit outside '
  'READ COMMITTED.';

-- One job taken: one less in the entries of its type and its key, where there are some.
create function pyjobq._count_down(p_counts jsonb, p_type text, p_key text)
returns jsonb
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select p_counts || coalesce(jsonb_object_agg(k, (p_counts ->> k)::int - 1), '{}')
    from unnest(array[p_type, p_key]) k
   where p_counts ? k
$$;

comment on function pyjobq._count_down(jsonb, text, text) is
  'p_counts with one less in its entries p_type and p_key, where present.';
