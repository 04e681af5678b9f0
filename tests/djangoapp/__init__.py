"""A minimal Django project for the pyjobq.contrib.django tests (``tests.djangoapp.settings``)."""
