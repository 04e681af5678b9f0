"""No models: pyjobq's tables live in its own schema, migrated by pyjobq. Django sends
``post_migrate`` only to applications with a models module, and this app registers the job
types of ``settings.PYJOBQ_JOB_TYPES`` on that signal (see apps.py)."""
