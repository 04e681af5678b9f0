"""Integrations with the frameworks Python applications hold their connections in.

Each one hands the bindings the psycopg connection the framework already has open, so an
enqueue runs inside the application's own transaction: it commits with the business rows it
belongs to, or rolls back with them.
"""
