-- Wake-ups ------------------------------------------------------------------
--
-- An idle worker LISTENs on channel pyjobq_job and sleeps until a NOTIFY. But
-- a NOTIFY costs every producer: a notifying transaction takes one lock for
-- the whole database at its commit and holds it until its commit record is
-- flushed, so producers that all notify commit one at a time. So a change that
-- makes a job PENDING notifies only when a worker may be asleep. Two advisory
-- locks (class 1887005297) say so:
--   (1887005297, -1), the idle mark: held shared, at session level, by each
--     worker asleep on LISTEN, from job_worker_idle to job_worker_busy;
--   (1887005297, -2), the fence: held shared by each transaction that found no
--     mark, until its commit.
-- A worker going to sleep takes its mark, then takes the fence for a moment.
-- Once it has, every transaction that looked before the mark existed has
-- committed (or rolled back), so the one claim it makes after that sees their
-- jobs, and every transaction that looks later notifies. Any role can take
-- advisory locks: holding these keys can make every enqueue notify (as if a
-- worker always slept), or keep a worker's fence from closing (it then polls);
-- it cannot make a notification go missing.

-- The announcement on channel pyjobq_job that a job of a type is PENDING: its
-- type alone when due now, "type@epoch" when it becomes due later, so an idle
-- worker that plans to claim before that time need not wake, and one that
-- plans to claim after it claims then instead; empty for jobs of any type.
-- Sent only when a worker may be asleep (above).
create function pyjobq._announce(p_job_type int, p_run_after timestamptz, p_now timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if pg_try_advisory_xact_lock_shared(1887005297, -2) then
    if pg_try_advisory_lock(1887005297, -1) then
      perform pg_advisory_unlock(1887005297, -1);
      return;  -- no worker asleep, and none can fall asleep before this commits
    end if;
  end if;
  perform pg_notify('pyjobq_job',
                    case when p_job_type is null then ''
                         when p_run_after <= p_now then p_job_type::text
                         else format('%s@%s', p_job_type, extract(epoch from p_run_after)) end);
end;
$$;

comment on function pyjobq._announce(int, timestamptz, timestamptz) is
  'Notifies channel pyjobq_job on commit, when a worker may be asleep, that a job of type p_job_type is '
  'PENDING: payload the type when p_run_after <= p_now, else type@run_after in seconds since 1970, empty when '
  'p_job_type is null. Otherwise holds the fence (advisory lock 1887005297, -2) until the commit.';

-- Falling asleep and waking (above). A worker that LISTENs
-- calls job_worker_idle on its listening connection when a claim comes back
-- short; when it answers true, the worker claims once more and then sleeps
-- until a NOTIFY (or its poll). It calls job_worker_busy when a claim fills,
-- so that producers stop notifying for it. The mark belongs to the session:
-- it ends with the connection. A session that LISTENs and never calls
-- job_worker_busy is notified of every job, as a listener of an older release.
create function pyjobq.job_worker_idle()
returns boolean
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if current_setting('pyjobq.idle_mark', true) is distinct from 'on' then
    -- Fails only for an instant (a producer looking) or while a session holds
    -- the key exclusively, when every producer notifies anyway.
    if not pg_try_advisory_lock_shared(1887005297, -1) then
      return false;
    end if;
    perform set_config('pyjobq.idle_mark', 'on', false);
  end if;
  -- The fence: free once every transaction that looked before the mark ended.
  if not pg_try_advisory_lock(1887005297, -2) then
    return false;
  end if;
  perform pg_advisory_unlock(1887005297, -2);
  return true;
end;
$$;

comment on function pyjobq.job_worker_idle() is
  'Marks this session as a worker asleep on LISTEN pyjobq_job, so that every change making a job PENDING '
  'notifies from now on. True once no transaction that looked for a mark before it is still open: claim once '
  'more, then sleep. False: such a transaction is open (or the mark could not be taken); call again shortly. Call '
  'it outside a transaction block, on the connection that LISTENs; job_worker_busy ends the mark.';

create function pyjobq.job_worker_busy()
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if current_setting('pyjobq.idle_mark', true) = 'on' then
    perform set_config('pyjobq.idle_mark', '', false);
    perform pg_advisory_unlock_shared(1887005297, -1);
  end if;
end;
$$;

comment on function pyjobq.job_worker_busy() is
  'Ends this session''s mark of job_worker_idle: producers stop notifying for it. A worker calls it when a claim '
  'comes back full.';
