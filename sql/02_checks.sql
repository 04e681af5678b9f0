-- Argument checks -------------------------------------------------------------

create function pyjobq._check_range(p_name text, p_value bigint, p_min bigint, p_max bigint)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_value is null then
    raise exception '% must not be null', p_name
      using errcode = '22004',
            hint = format('Pass a value between %s and %s, or leave it out where it has a default.', p_min, p_max);
  end if;
  if p_value < p_min or p_value > p_max then
    raise exception '% must be between % and %', p_name, p_min, p_max
      using errcode = '22023',
            detail = format('%s was %s.', p_name, p_value);
  end if;
end;
$$;

comment on function pyjobq._check_range(text, bigint, bigint, bigint) is
  'Raises 22004 when p_value is null and 22023 when it is outside [p_min, p_max], naming the argument.';

create function pyjobq._check_text(p_name text, p_value text, p_max_length int, p_nullable boolean)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_value is null then
    if p_nullable then
      return;
    end if;
    raise exception '% must not be null', p_name
      using errcode = '22004',
            hint = format('Pass a non-blank text of at most %s characters.', p_max_length);
  end if;
  if btrim(p_value, E' \t\n\r\f\v') = '' or length(p_value) > p_max_length then
    raise exception '% must be a non-blank text of 1 to % characters', p_name, p_max_length
      using errcode = '22023',
            detail = format('%s had %s characters.', p_name, length(p_value));
  end if;
end;
$$;

comment on function pyjobq._check_text(text, text, int, boolean) is
  'Raises 22004 for a null text (unless p_nullable) and 22023 for a blank one (nothing but spaces, tabs or '
  'line breaks) or one longer than p_max_length.';

-- Arrays pair their elements by position (a payload with its dedupe key, a job
-- id with its attempt), so every array argument is one-dimensional and its
-- positions count from 1: an array written '[0:1]={a,b}' is renumbered (a
-- slice always starts at 1), a multi-dimensional one refused.
create function pyjobq._check_array(p_name text, p_value anyarray)
returns anyarray
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if array_ndims(p_value) > 1 then
    raise exception '% must be a one-dimensional array', p_name
      using errcode = '22023',
            detail = format('%s has %s dimensions.', p_name, array_ndims(p_value)),
            hint = 'Pass a plain list of values, e.g. ARRAY[...] or ''{...}''.';
  end if;
  if array_lower(p_value, 1) <> 1 then
    return p_value[array_lower(p_value, 1):array_upper(p_value, 1)];
  end if;
  return p_value;
end;
$$;

comment on function pyjobq._check_array(text, anyarray) is
  'Returns p_value renumbered from 1 when it starts elsewhere; raises 22023 when it has more than one dimension.';

create function pyjobq._check_same_length(p_name text, p_length int, p_expected int)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_length <> p_expected then
    raise exception '% must have as many elements as p_job_ids', p_name
      using errcode = '22023',
            detail = format('p_job_ids has %s, %s %s.', p_expected, p_name, p_length),
            hint = 'Pass one element per job, in the order of p_job_ids.';
  end if;
end;
$$;

comment on function pyjobq._check_same_length(text, int, int) is
  'Raises 22023 naming p_name when its array length p_length differs from p_job_ids'' p_expected.';

create function pyjobq._check_time(p_name text, p_value timestamptz, p_now timestamptz)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  -- Finite and within a century of now: 'infinity' would make a job that is
  -- never due, or a bound that cannot be turned into a job id.
  if p_value is not null
     and not (isfinite(p_value) and p_value between p_now - interval '100 years' and p_now + interval '100 years') then
    raise exception '% must be a time within 100 years of now', p_name
      using errcode = '22023',
            detail = format('%s was %s.', p_name, p_value),
            hint = 'Leave it out for the default.';
  end if;
end;
$$;

comment on function pyjobq._check_time(text, timestamptz, timestamptz) is
  'Raises 22023 naming p_name unless p_value is null or a finite time within 100 years of p_now.';

create function pyjobq._check_unique_for(p_unique_for interval, p_has_key boolean)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_unique_for is null then
    return;
  end if;
  if not isfinite(p_unique_for) or p_unique_for <= interval '0' or p_unique_for > interval '365 days' then
    raise exception 'p_unique_for must be more than 0 and at most 365 days'
      using errcode = '22023',
            detail = format('p_unique_for was %s.', p_unique_for),
            hint = 'Leave it out to treat only active jobs as duplicates.';
  end if;
  if not p_has_key then
    raise exception 'p_unique_for needs a dedupe key'
      using errcode = '22023',
            hint = 'Pass p_dedupe_key (p_dedupe_keys for job_enqueue_many): the window is per type and key.';
  end if;
end;
$$;

comment on function pyjobq._check_unique_for(interval, boolean) is
  'Raises 22023 unless p_unique_for is null, or more than 0 and at most 365 days with a dedupe key given.';

create function pyjobq._check_seconds(p_name text, p_value double precision, p_above double precision,
                                      p_max double precision)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  -- Null is the default; NaN fails both comparisons' negation below.
  if p_value is not null and not (p_value > p_above and p_value <= p_max) then
    raise exception '% must be more than % and at most % seconds', p_name, p_above, p_max
      using errcode = '22023',
            detail = format('%s was %s.', p_name, p_value),
            hint = 'Leave it out for the default.';
  end if;
end;
$$;

comment on function pyjobq._check_seconds(text, double precision, double precision, double precision) is
  'Raises 22023 naming p_name unless p_value is null or a number of seconds in (p_above, p_max].';

-- The name of each status code, for the functions that show one.
create function pyjobq._status_name(p_status int)
returns text
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return (array['PENDING', 'RUNNING', 'DONE', 'DEAD', 'CANCELLED', 'WAITING'])[p_status];
end;
$$;

comment on function pyjobq._status_name(int) is
  'PENDING, RUNNING, DONE, DEAD, CANCELLED or WAITING for status 1..6 (job_status_valid).';

create function pyjobq._check_job_type(p_job_type int)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_range('p_job_type', p_job_type, 1, 32767);
  perform 1 from pyjobq.job_type t where t.job_type = p_job_type;
  if not found then
    raise exception 'p_job_type % is not a registered job type', p_job_type
      using errcode = '22023',
            hint = 'pyjobq.job_types() lists the known ones; an admin (pyjobq_admin) registers a type with '
                   'pyjobq.job_type_register(code, name).';
  end if;
end;
$$;

comment on function pyjobq._check_job_type(int) is
  'Raises 22023 unless p_job_type is a registered job type code.';

create function pyjobq._check_payload(p_name text, p_payload jsonb)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_payload is not null and jsonb_typeof(p_payload) <> 'object' then
    raise exception '% must be a JSON object', p_name
      using errcode = '22023',
            detail = format('%s was a JSON %s.', p_name, jsonb_typeof(p_payload)),
            hint = 'Wrap the value in an object, e.g. {"value": ...}.';
  end if;
end;
$$;

comment on function pyjobq._check_payload(text, jsonb) is
  'Raises 22023 unless p_payload is null or a JSON object.';

create function pyjobq._check_size(p_name text, p_value jsonb, p_max_bytes int, p_hint text)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if pg_column_size(p_value) > p_max_bytes then
    raise exception '% must be at most %', p_name,
                    case when p_max_bytes % 1048576 = 0 then format('%s MiB', p_max_bytes / 1048576)
                         when p_max_bytes % 1024 = 0 then format('%s KiB', p_max_bytes / 1024)
                         else format('%s bytes', p_max_bytes) end
      using errcode = '22023',
            detail = format('%s took %s bytes.', p_name, pg_column_size(p_value)),
            hint = p_hint;
  end if;
end;
$$;

comment on function pyjobq._check_size(text, jsonb, int, text) is
  'Raises 22023, with p_hint, when p_value takes more than p_max_bytes as stored (compressed, if it is).';

create function pyjobq._check_payloads(p_payloads jsonb[])
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_bad int;
begin
  select min(u.i) into v_bad
    from unnest(p_payloads) with ordinality as u(payload, i)
   where u.payload is null or jsonb_typeof(u.payload) <> 'object';
  if v_bad is not null then
    raise exception 'p_payloads[%] must be a JSON object', v_bad
      using errcode = '22023',
            hint = 'Every payload must be a JSON object, e.g. {"value": ...}.';
  end if;
end;
$$;

comment on function pyjobq._check_payloads(jsonb[]) is
  'Raises 22023 naming the first element of p_payloads that is null or not a JSON object.';

-- A per-payload array of keys (dedupe or concurrency keys) of job_enqueue_many:
-- null, or one element per payload, each null or 1..200 non-blank characters.
create function pyjobq._check_keys(p_name text, p_keys text[], p_count int)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_bad int;
begin
  if p_keys is null then
    return;
  end if;
  if cardinality(p_keys) <> p_count then
    raise exception '% must have as many elements as p_payloads', p_name
      using errcode = '22023',
            detail = format('p_payloads has %s, %s %s.', p_count, p_name, cardinality(p_keys)),
            hint = 'Use null elements for jobs without a key.';
  end if;
  select min(u.i) into v_bad
    from unnest(p_keys) with ordinality as u(key, i)
   where btrim(u.key, E' \t\n\r\f\v') = '' or length(u.key) > 200;
  if v_bad is not null then
    raise exception '%[%] must be null or a non-blank text of 1 to 200 characters', p_name, v_bad
      using errcode = '22023';
  end if;
end;
$$;

comment on function pyjobq._check_keys(text, text[], int) is
  'Raises 22023 naming p_name unless p_keys is null or has p_count elements, each null or a non-blank text '
  'of 1 to 200 characters.';

-- A holder's transition without its lease token: the signature of before
-- tokens. Refused unless the caller owns the schema (it could read the token)
-- or the install still accepts such calls (job_settings_set).
create function pyjobq._check_lease_token(p_name text, p_missing boolean)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_missing
     and (select s.require_lease_token from pyjobq.setting s)
     and not pyjobq._session_owns_schema() then
    raise exception '% must not be null', p_name
      using errcode = '22004',
            detail = 'This install requires the lease_token that job_claim returned with the job.',
            hint = 'Pass the claim''s lease_token. Until every client does, an admin may accept calls '
                   'without it: select pyjobq.job_settings_set(p_require_lease_token => false).';
  end if;
end;
$$;

comment on function pyjobq._check_lease_token(text, boolean) is
  'Raises 22004 naming p_name when p_missing (a transition without its lease token), the install requires '
  'tokens and the session does not own the schema.';

-- The lease tokens of a _many call: one per job when given, and checked like
-- one token when absent, wholly or for some job.
create function pyjobq._check_lease_tokens(p_lease_tokens uuid[], p_count int)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_lease_tokens is not null then
    perform pyjobq._check_same_length('p_lease_tokens', cardinality(p_lease_tokens), p_count);
  end if;
  perform pyjobq._check_lease_token('p_lease_tokens',
                                    p_lease_tokens is null or array_position(p_lease_tokens, null) is not null);
end;
$$;

comment on function pyjobq._check_lease_tokens(uuid[], int) is
  'Raises 22023 unless p_lease_tokens is null or has p_count elements, and 22004 as _check_lease_token does '
  'when it is null or holds a null.';

-- The arguments a holder's call on many jobs takes: p_worker_id, 1 to 10000
-- job ids, an attempt per job and a lease token per job (or none, where
-- job_settings accepts it), each array renumbered from 1.
create function pyjobq._check_held_batch(
  inout p_job_ids uuid[],
  inout p_attempts int[],
  inout p_lease_tokens uuid[],
  p_worker_id text
)
returns record
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  p_lease_tokens := pyjobq._check_array('p_lease_tokens', p_lease_tokens);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
  perform pyjobq._check_lease_tokens(p_lease_tokens, v_count);
end;
$$;

comment on function pyjobq._check_held_batch(uuid[], int[], uuid[], text) is
  'Checks the arguments of a holder''s call on many jobs (p_worker_id, 1..10000 p_job_ids, as many p_attempts '
  'and p_lease_tokens) as _check_text, _check_range, _check_same_length and _check_lease_tokens do, and returns '
  'the arrays renumbered from 1 (_check_array).';


-- The arguments a holder's call on one job takes: p_worker_id, the attempt
-- job_claim returned, and its lease token (or none, where job_settings
-- accepts it).
create function pyjobq._check_holder(p_worker_id text, p_attempt int, p_lease_token uuid)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
end;
$$;

comment on function pyjobq._check_holder(text, int, uuid) is
  'Checks the arguments of a holder''s call on one job: p_worker_id as _check_text, p_attempt 1..32767, and '
  'p_lease_token as _check_lease_token.';

-- Why a transition on a job did not happen: raised after a guarded update
-- matched no row, so the caller learns whether the job is gone, already
-- finished by this very attempt, or no longer theirs.
create function pyjobq._raise_not_held(p_job_id uuid, p_worker_id text, p_attempt int, p_lease_token uuid)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_status smallint;
  v_worker text;
  v_attempts smallint;
  v_job_type smallint;
  v_token uuid;
  v_deadline timestamptz;
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the job_id that job_claim returned.';
  end if;
  select j.status, j.worker_id, j.attempts, j.job_type, j.lease_token,
         j.run_started_at + make_interval(secs => t.timeout_seconds)
    into v_status, v_worker, v_attempts, v_job_type, v_token, v_deadline
    from pyjobq.job_all j
    join pyjobq.job_type t on t.job_type = j.job_type
   where j.job_id = p_job_id;
  if found then
    perform pyjobq._check_privilege('work', array[v_job_type]);
  else
    raise exception 'job % does not exist', p_job_id
      using errcode = 'JQ002',
            hint = 'It may have been pruned, or the id is wrong.';
  end if;
  if v_status = 5 then
    raise exception 'job % was cancelled', p_job_id
      using errcode = 'JQ005',
            hint = 'Stop working on it: nothing this attempt does is recorded.';
  end if;
  if v_status in (3, 4) and v_worker = p_worker_id and v_attempts = p_attempt
     and (p_lease_token is null or v_token = p_lease_token) then
    raise exception 'job % is already %', p_job_id, pyjobq._status_name(v_status)
      using errcode = 'JQ003',
            detail = format('Attempt %s of worker %s already finished it.', p_attempt, p_worker_id),
            hint = 'Finish each claimed attempt once.';
  end if;
  if v_status = 2 and v_worker = p_worker_id and v_attempts = p_attempt
     and (p_lease_token is null or v_token = p_lease_token) then
    -- Still the caller's, but a renewal past the attempt's deadline.
    raise exception 'attempt % of job % is past its deadline', p_attempt, p_job_id
      using errcode = 'JQ001',
            detail = format('Its deadline was %s: the claim plus the timeout_seconds of its type.', v_deadline),
            hint = 'Stop working on it: once its lease runs out the reaper retries it elsewhere.';
  end if;
  -- The detail names the status only: nothing of the holder's fencing token
  -- (its worker id, attempt or lease token) is told to another caller.
  raise exception 'worker % no longer holds attempt % of job %', p_worker_id, p_attempt, p_job_id
    using errcode = 'JQ001',
          detail = format('The job is %s now.', pyjobq._status_name(v_status)),
          hint = 'The lease expired and the job was reaped or claimed again: drop this result, the job runs (or ran) elsewhere.';
end;
$$;

comment on function pyjobq._raise_not_held(uuid, text, int, uuid) is
  'Raises 22004 (null p_job_id), JQ002, JQ003 or JQ001 to explain why (p_worker_id, p_attempt, p_lease_token) '
  'could not act on job p_job_id.';

-- Tries a job has left: its budget (max_attempts) minus the tries used, and
-- never more than the claims its smallint counter can still hand out.
create function pyjobq._tries_left(p_attempts int, p_attempts_refunded int, p_max_attempts int)
returns int
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return least(p_max_attempts - (p_attempts - p_attempts_refunded), 32767 - p_attempts);
end;
$$;

comment on function pyjobq._tries_left(int, int, int) is
  'How many more times a job with these counters may be claimed: max_attempts minus the tries used '
  '(attempts - attempts_refunded), at most 32767 - attempts.';

-- Retry delay after attempt p_attempt: 2 s doubling per attempt, capped at one
-- hour, minus up to 25% random jitter so retries of a burst spread out.
create function pyjobq.retry_backoff(p_attempt int)
returns interval
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select make_interval(secs => least(3600.0, 2.0 * power(2.0, greatest(p_attempt, 1) - 1))
                               * (1.0 - 0.25 * random()))
$$;

comment on function pyjobq.retry_backoff(int) is
  'Delay before the retry that follows attempt p_attempt: least(1 hour, 2 s * 2^(p_attempt - 1)) minus up to 25% jitter.';

-- Row checks ------------------------------------------------------------------

-- What every row of pyjobq.job holds to: its one CHECK constraint, below. A
-- function, because PostgreSQL reads a CHECK's stored expression again, and
-- plans it again, in every statement that writes the table: seven checks
-- written inline cost each enqueue and each claim's lease 40 to 50 µs, where
-- a PL/pgSQL function's expression is planned once per session (schema 66;
-- docs/performance.md, "A plain insert for a job without a key, and the job
-- table's rules in one function"). Each part holds where it is not false, as
-- a CHECK of its own would.
create function pyjobq._job_row_valid(
  p_status smallint,
  p_waiting_on int,
  p_run_on_parent_failure boolean,
  p_payload jsonb,
  p_metadata jsonb,
  p_attempts smallint,
  p_attempts_refunded smallint,
  p_max_attempts smallint,
  p_lease_until timestamptz,
  p_worker_id text
)
returns boolean
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return p_status in (1, 2, 6)  -- active: an ended job is in job_history
     -- WAITING for some parent; parents' counts and policy set together
     and (p_status <> 6 or p_waiting_on > 0)
     and (p_waiting_on is null) = (p_run_on_parent_failure is null)
     and jsonb_typeof(p_payload) = 'object'
     and jsonb_typeof(p_metadata) = 'object'
     and p_attempts_refunded between 0 and p_attempts
     and p_attempts - p_attempts_refunded <= p_max_attempts
     and (p_status = 2) = (p_lease_until is not null)  -- RUNNING exactly while leased
     and (p_status <> 2 or p_worker_id is not null);
end;
$$;

comment on function pyjobq._job_row_valid(smallint, int, boolean, jsonb, jsonb, smallint, smallint, smallint,
                                          timestamptz, text) is
  'pyjobq.job''s CHECK constraint job_row_valid: false when the columns given break one of its rules (an '
  'ended status, a WAITING job waiting on nothing, a payload or metadata that is not an object, attempts '
  'refunded or used past max_attempts, a lease without RUNNING or RUNNING without a lease or a worker).';

alter table pyjobq.job
  add constraint job_row_valid check (pyjobq._job_row_valid(status, waiting_on, run_on_parent_failure, payload, metadata,
                                                            attempts, attempts_refunded, max_attempts, lease_until,
                                                            worker_id));
