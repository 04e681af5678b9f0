"""A shop's tasks, a module per concern, found by ``pyjobq worker shop_tasks``
(:func:`pyjobq.tasks.discover`) with no handler table written by hand."""

from pyjobq.tasks import Tasks

tasks = Tasks()
