"""Requests in and records out: trace rows to requests (``ingest``), rejection reasons, the
per-step and per-request records, the typed run summary, and number formatting for people."""
