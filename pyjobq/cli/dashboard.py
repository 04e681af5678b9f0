"""``pyjobq dashboard``: serve the dashboard (the ``dashboard`` extra) for a queue."""

from __future__ import annotations

import click

from pyjobq import logs
from pyjobq.cli.common import dsn_option, fail, log_options, queue, resolve_dsn
from pyjobq.cli.group import main


@main.command()
@dsn_option
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", default=8788, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--allow-actions",
    is_flag=True,
    help="offer cancel, redrive, prune, signals, pause and resume (to a role that may call them);"
    " else read-only",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="listen on an address beyond loopback (needs --token)",
)
@click.option(
    "--token",
    envvar="PYJOBQ_DASHBOARD_TOKEN",
    metavar="TOKEN",
    help="every request must carry it: Authorization: Bearer, or the /login form's cookie "
    "[default: $PYJOBQ_DASHBOARD_TOKEN]",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="a name its users reach it by (repeat for more), also behind a proxy that passes "
    "another Host; a request with any other Host, or a POST from any other site, is refused "
    "[default: the --host address, and on loopback localhost, 127.0.0.1 and ::1]",
)
@click.option(
    "--actor-header",
    metavar="HEADER",
    help="the header an authenticating proxy sets to its user (e.g. X-Forwarded-User), "
    "named in audit lines",
)
@log_options
def dashboard(
    dsn: str | None,
    host: str,
    port: int,
    allow_actions: bool,
    allow_remote: bool,
    token: str | None,
    allowed_hosts: tuple[str, ...],
    actor_header: str | None,
    log_level: str,
    log_format: str,
) -> None:
    """Serve the dashboard: counts, throughput, workers, jobs, each job, the audit log.

    It connects with the role the DSN names and shows what that role may call; cancel,
    redrive, prune, signals, pause and resume only with --allow-actions. It listens on loopback
    unless given --allow-remote and a --token, and answers only requests sent to its own names.
    """
    try:
        from pyjobq.dashboard import DashboardSettings, serve
        from pyjobq.dashboard.settings import UnsafeListen, check_listen, own_hosts
    except ImportError as e:
        fail(
            f"the dashboard needs its extra ({e.name} is missing): pip install 'pyjobq[dashboard]'",
            2,
        )
    try:
        check_listen(host, allow_remote, token, allowed_hosts)
    except UnsafeListen as e:
        fail(str(e), 2)
    resolved = resolve_dsn(dsn)
    with queue(resolved):
        pass  # reachable, and its schema suits this package
    settings = DashboardSettings(
        dsn=resolved,
        allow_actions=allow_actions,
        token=token,
        actor_header=actor_header,
        hosts=own_hosts(host, allowed_hosts),
        origins=tuple(name.lower() for name in allowed_hosts),
    )
    logs.configure(log_level, log_format)
    click.echo(f"pyjobq dashboard on http://{host}:{port}/", err=True)
    serve(settings, host, port)
