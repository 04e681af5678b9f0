"""A Django TestCase, run by Django's own test runner from tests/test_contrib_django.py: its
test database gets the pyjobq schema from the app's migration, as an application's would."""

from __future__ import annotations

from django.db import transaction
from django.test import TestCase

from pyjobq import JobType
from pyjobq.contrib.django import job_queue


class OutboxCase(TestCase):
    def test_an_enqueue_in_atomic_is_there_inside_the_test(self) -> None:
        with transaction.atomic():
            job = job_queue().enqueue(JobType.OUTBOX, {"email": "ada@example.com"})
        info = job_queue().get(job.job_id)
        assert info is not None
        assert (info.status_name, info.payload) == ("PENDING", {"email": "ada@example.com"})

    def test_a_type_of_the_settings_is_enqueued_by_name(self) -> None:
        job = job_queue().enqueue("PROCESS_ORDER", {"order": 7})
        info = job_queue().get(job.job_id)
        assert info is not None
        assert (info.job_type, info.job_type_name) == (100, "PROCESS_ORDER")
