"""Ingestion: discovering targets (static, Kubernetes), scraping them, reading node capacity.

Everything here talks to the outside world and hands plain `scaler.core` data onwards.
"""
