"""Serving the latest Decision: KEDA gRPC API, HTTP health and /metrics, TLS, snapshots.

Readers only: nothing here scrapes or decides.
"""
