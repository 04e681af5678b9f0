-- depends: 0061_replace_and_debounce

-- Schema 62: job_type_allocate (admins) registers a type by name alone, under
-- the smallest free code from 1000 on. No table changes.

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 62
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq.job_type_allocate(p_name text)
returns table (job_type int, name text, created boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_code int;
begin
  perform pyjobq._check_text('p_name', p_name, 63, false);
  loop
    select t.job_type into v_code from pyjobq.job_type t where t.name = p_name;
    if found then
      return query select v_code, p_name, false;
      return;
    end if;
    select min(c.code) into v_code
      from generate_series(1000, 32767) c(code)
     where not exists (select from pyjobq.job_type t where t.job_type = c.code);
    if v_code is null then
      raise exception 'no job type code is left from 1000 to 32767 for %', p_name
        using errcode = '54000',
              hint = 'Register the type under a code below 1000 with job_type_register(code, name).';
    end if;
    insert into pyjobq.job_type as t (job_type, name)
    values (v_code, p_name)
    on conflict do nothing;
    if found then
      return query select v_code, p_name, true;
      return;
    end if;
  end loop;
end;
$$;

comment on function pyjobq.job_type_allocate(text) is
  'The code of the job type named p_name (1..63 characters), registering it first under the smallest free code '
  'from 1000 on when no type has that name (created true); safe when sessions allocate at once.';


insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_type_allocate(text)', '{pyjobq_admin}');

do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
