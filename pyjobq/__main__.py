"""``python -m pyjobq``: the ``pyjobq`` command."""

from pyjobq.cli import main

main(prog_name="pyjobq")
