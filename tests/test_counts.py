"""job_counts on a large history: exact where it drives decisions, never a scan of the DONE rows."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.sqlhelp import claim, enqueue, one_row

Conn = psycopg.Connection[Any]

HISTORY = 40_000  # DONE jobs: several MiB of table, beyond the 1 MiB read exactly


def finish_history(conn: Conn, jobs: int, job_type: int = 1) -> None:
    """``jobs`` DONE jobs of ``job_type``, moved to the history directly as the owner, as a
    completion moves them: what years of drains leave."""
    conn.execute(
        "select count(*) from pyjobq.job_enqueue_many(%s,"
        " array(select '{\"n\": 1}'::jsonb from generate_series(1, %s)))",
        (job_type, jobs),
    )
    conn.execute(
        "with done as (delete from pyjobq.job j where j.job_type = %s and j.status = 1 returning j)"
        " select pyjobq._to_history(array_agg(d.j), array_agg(3::smallint), pyjobq.clock_now())"
        " from done d",
        (job_type,),
    )


HISTORY_LEAVES = "select relid from pg_partition_tree('pyjobq.job_history') where isleaf"


def counts(conn: Conn) -> dict[tuple[int, int], tuple[Any, bool]]:
    rows = conn.execute("select job_type, status, jobs, exact from pyjobq.job_counts()")
    return {(t, s): (jobs, exact) for t, s, jobs, exact in rows.fetchall()}


def active_jobs(conn: Conn) -> None:
    """On type 1: three PENDING, one RUNNING, one DEAD; on type 2: one PENDING."""
    for _ in range(5):
        enqueue(conn)
    (dead, attempt), _running = claim(conn, "w1", 2)
    conn.execute("select pyjobq.job_fail(%s, 'w1', %s, 'x', null, true)", (dead, attempt))
    enqueue(conn, 2)


def table_reads(conn: Conn) -> tuple[int, int]:
    """(sequential scans, heap blocks read or hit) of the history's partitions so far."""
    conn.execute("select pg_stat_force_next_flush()")
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute(
        "select sum(t.seq_scan)::int, sum(io.heap_blks_read + io.heap_blks_hit)::int"
        " from pg_stat_user_tables t join pg_statio_user_tables io using (relid)"
        f" where t.relid in ({HISTORY_LEAVES})"
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_a_small_table_is_counted_exactly(conn: Conn) -> None:
    finish_history(conn, 100)
    active_jobs(conn)
    got = counts(conn)
    assert got[(1, 1)] == (3, True)
    assert got[(1, 2)] == (1, True)
    assert got[(1, 3)] == (100, True)
    assert got[(1, 4)] == (1, True)
    assert got[(2, 1)] == (1, True)


def test_active_and_dead_jobs_are_exact_and_done_an_estimate_on_a_large_history(
    conn: Conn,
) -> None:
    finish_history(conn, HISTORY)
    active_jobs(conn)
    # Before any ANALYZE: shares from a sample of pages, rows from the server's live count.
    conn.execute("select pg_stat_force_next_flush()")
    conn.execute("select pg_stat_clear_snapshot()")
    for analyzed in (False, True):
        if analyzed:
            conn.execute("analyze pyjobq.job_history")
        got = counts(conn)
        assert got[(1, 1)] == (3, True)
        assert got[(1, 2)] == (1, True)
        assert got[(1, 4)] == (1, True)
        assert got[(2, 1)] == (1, True)
        done, exact = got[(1, 3)]
        assert not exact
        assert abs(done - HISTORY) <= HISTORY * 0.05, (analyzed, done)
        # Type 2 has no DONE job: what is left for it is what the shares and exact counts miss.
        other, exact = got[(2, 3)]
        assert not exact
        assert other <= HISTORY * 0.01, (analyzed, other)


def test_a_type_too_rare_for_the_statistics_gets_what_they_leave(conn: Conn) -> None:
    """A type whose DONE jobs are missing from the sample read about 0: it now gets the rows
    that no share and no exact count accounts for."""
    finish_history(conn, HISTORY)
    rare = 2_000
    finish_history(conn, rare, job_type=2)
    active_jobs(conn)
    # The smallest list the statistics keep: the most common (type, status) alone.
    conn.execute("alter statistics pyjobq.job_type_status_stats set statistics 1")
    conn.execute("analyze pyjobq.job_history")
    (listed,) = one_row(
        conn,
        "select most_common_vals from pg_stats_ext where statistics_name = 'job_type_status_stats'",
    )
    assert listed == [["1", "3"]]
    done, exact = counts(conn)[(2, 3)]
    assert not exact
    assert abs(done - rare) <= rare * 0.2, done


def test_counts_read_no_finished_row(conn: Conn) -> None:
    # The plan test: whatever the statistics say, the DONE history is never scanned. A scan
    # of it would read every heap page; the active jobs live on a handful. Before the first
    # ANALYZE the estimate reads a sample of about 32 pages (SYSTEM sampling: 64 bounds it far
    # beyond chance); after it, nothing of the history.
    finish_history(conn, HISTORY)
    active_jobs(conn)
    (pages,) = one_row(
        conn,
        "select sum(pg_relation_size(relid))::int / current_setting('block_size')::int"
        f" from ({HISTORY_LEAVES}) h",
    )
    for analyzed in (False, True):
        if analyzed:
            conn.execute("analyze pyjobq.job_history")
        scans, blocks = table_reads(conn)
        counts(conn)
        scans_after, blocks_after = table_reads(conn)
        assert scans_after == scans
        sample = 0 if analyzed else 64
        assert blocks_after - blocks <= 20 + sample < pages


def test_dead_history_is_counted_up_to_a_bound_then_estimated(conn: Conn) -> None:
    """DEAD (and CANCELLED) rows were all counted through their index at every call, so the
    call grew with the dead history: now 10001 index entries per type and status at most."""
    dead = 12_000
    finish_history(conn, dead)
    conn.execute("update pyjobq.job_history set status = 4")
    active_jobs(conn)
    conn.execute("analyze pyjobq.job_history")
    conn.execute("select pg_stat_force_next_flush()")
    conn.execute("select pg_stat_clear_snapshot()")
    read = (
        "select sum(idx_tup_read) from pg_stat_user_indexes where indexrelid in"
        " (select relid from pg_partition_tree('pyjobq.job_dead_cancelled_idx'))"
    )
    (before,) = one_row(conn, read)
    got = counts(conn)
    conn.execute("select pg_stat_force_next_flush()")
    conn.execute("select pg_stat_clear_snapshot()")
    (after,) = one_row(conn, read)
    jobs, exact = got[(1, 4)]
    assert not exact
    assert jobs > 10_000
    assert abs(jobs - (dead + 1)) <= dead * 0.05, jobs
    assert got[(2, 4)] == (0, True)
    assert got[(1, 5)] == (0, True)
    assert after - before <= 10_001 + 1  # type 1's DEAD up to the bound, the rest empty
