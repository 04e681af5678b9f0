"""``pyjobq worker``: the handlers it loads, and its options read from WorkerConfig."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, get_args, get_type_hints

import click

from pyjobq.cli.common import F, dsn_option, fail, log_options, reporting, resolve_dsn
from pyjobq.cli.group import main

if TYPE_CHECKING:
    from pyjobq.exporter import WorkerExporter
    from pyjobq.worker import Handler, WorkerConfig


def as_type(text: str) -> int | str:
    """A job type as given on the command line: a code, or a name."""
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else text


def check_handlers(table: Mapping[Any, Any]) -> None:
    """Each key a job type code or name, each value callable; else one line on stderr and exit
    2. Whether the types are registered is the worker's first check, when it connects."""
    for key, handler in table.items():
        if isinstance(key, bool) or not isinstance(key, int | str):
            fail(f"handler key {key!r} is neither a job type code nor a job type name", 2)
        if not callable(handler):
            fail(f"the handler for job type {key!r} is not callable: {handler!r}", 2)


def load_handlers(path: str) -> Mapping[Any, Any]:
    """Import ``module:attribute``: a mapping of job type to handler, a function returning one,
    or a :class:`~pyjobq.tasks.Tasks`; or, a package alone, the tasks declared in its modules
    (:func:`~pyjobq.tasks.discover`). Whatever goes wrong (the module fails to import or
    raises, the attribute is missing or of the wrong kind) is one line on stderr and exit 2."""
    from pyjobq.tasks import Tasks, discover

    module_name, colon, attribute = path.partition(":")
    if not module_name or (colon and not attribute):
        fail(f"{path!r} is neither a package nor of the form module:attribute", 2)
    sys.path.insert(0, os.getcwd())
    handlers: Any
    try:
        if not colon:
            handlers = discover(module_name).handlers()
        else:
            handlers = getattr(importlib.import_module(module_name), attribute, None)
        if isinstance(handlers, Tasks):
            handlers = handlers.handlers()
        elif callable(handlers) and not isinstance(handlers, Mapping):
            handlers = handlers()
    except Exception as e:  # the user's module: anything it raises is a startup error
        fail(f"cannot load {path}: {type(e).__name__}: {e}", 2)
    if not isinstance(handlers, Mapping) or not handlers:
        fail(f"{path} is not a non-empty mapping of job type to handler", 2)
    return handlers


def worker_settings(f: F) -> F:
    """One option per :class:`WorkerConfig` setting that has flags, with its help, default and
    range as WorkerConfig states them; the command checks them by making the config."""
    from pyjobq.worker.config import WorkerConfig, describe_range

    hints = get_type_hints(WorkerConfig)
    for setting in reversed(dataclasses.fields(WorkerConfig)):
        flags, meta = setting.metadata["flag"], setting.metadata
        if not flags:
            continue
        hint = hints[setting.name]
        if hint is bool:  # the flag turns it off when it is on by default, else on
            on = setting.default is True
            option = click.option(
                *flags, setting.name, is_flag=True, flag_value=not on, default=on,
                help=meta["off_help"] if on else meta["help"],
            )  # fmt: skip
            f = option(f)
            continue
        kind = next(t for t in (int, float, str) if t is hint or t in get_args(hint))
        details = [] if setting.default is None else [f"default: {setting.default}"]
        if meta["low"] is not None:
            details.append(describe_range(setting.name))
        suffix = f" [{'; '.join(details)}]" if details else ""
        f = click.option(*flags, setting.name, type=kind, help=f"{meta['help']}{suffix}")(f)
    return f


def worker_config(settings: Mapping[str, Any]) -> WorkerConfig:
    """The WorkerConfig that the settings options make (one not given keeps its default); a
    value out of range is one line on stderr and exit 2."""
    from pyjobq.worker import WorkerConfig

    try:
        return WorkerConfig(**{k: v for k, v in settings.items() if v is not None})
    except ValueError as e:
        fail(f"invalid worker setting: {e}", 2)


def serve_metrics(host: str, port: int) -> WorkerExporter:
    """A :class:`~pyjobq.exporter.WorkerExporter`, its registry served on ``host:port``."""
    try:
        from prometheus_client import start_http_server

        from pyjobq.exporter import WorkerExporter
    except ImportError:
        fail("--metrics-port needs prometheus-client: pip install 'pyjobq[metrics]'", 2)
    exporter = WorkerExporter()
    try:
        start_http_server(port, addr=host, registry=exporter.registry)
    except OSError as e:
        fail(f"cannot serve metrics on {host}:{port}: {e.strerror}", 2)
    return exporter


@main.command()
@dsn_option
@click.argument("handlers")
@click.option(
    "--types",
    "only",
    help="comma-separated job type codes or names to take (default: all handled)",
)
@worker_settings
@click.option("--metrics-file", type=click.Path(dir_okay=False), help="write final metrics as JSON")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="serve Prometheus metrics on this port, at /metrics (needs prometheus-client)",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="the address --metrics-port listens on",
)
@log_options
def worker(
    dsn: str | None,
    handlers: str,
    only: str | None,
    metrics_file: str | None,
    metrics_port: int | None,
    metrics_host: str,
    log_level: str,
    log_format: str,
    **settings: Any,
) -> None:
    """Run a worker for the handlers in HANDLERS (`module:attribute`, a dict of type -> function).

    SIGTERM or Ctrl-C drains: no new claims, prefetched jobs released, running jobs given
    --shutdown-timeout to finish. A second signal stops at once.
    """
    from pyjobq import logs
    from pyjobq.worker import Handlers, Worker

    config = worker_config(settings)
    logs.configure(log_level, log_format)
    table = load_handlers(handlers)
    check_handlers(table)
    # A program that embeds the command line (``manage.py pyjobq``) may give, as click's
    # ``obj``, a function to wrap every handler in: the only use of ``obj`` in any command.
    wrap: Callable[[Handler], Handler] | None = click.get_current_context().obj
    if wrap is not None:
        if isinstance(table, Handlers):
            table = table.wrapped(wrap)
        else:
            table = {t: wrap(h) for t, h in table.items()}
    types = None if only is None else [as_type(t) for t in only.split(",")]
    exporter = None if metrics_port is None else serve_metrics(metrics_host, metrics_port)
    w = Worker(resolve_dsn(dsn), table, config, job_types=types, hooks=exporter)
    if exporter is not None:
        exporter.watch(w.metrics)
    with reporting():
        try:
            metrics = w.run()
        except ValueError as e:  # the handlers or --types do not match the database's types
            fail(str(e), 2)
    if metrics_file:
        with open(metrics_file, "w") as f:
            json.dump({"worker_id": w.worker_id, **metrics.as_dict()}, f)
    if w.abandoned or w.lingering_threads:
        # Handler threads still running (abandoned at shutdown, or past their timeout): do not
        # wait for them; the leases of abandoned jobs will expire.
        logging.shutdown()
        os._exit(w.exit_code)
    if w.crashed is not None:
        fail(f"the worker stopped on an internal error: {w.crashed!r} (see the log above)")
