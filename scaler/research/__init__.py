"""Research work queue: researchers submit items per research class; `gpu-pool-worker`
runs them inside the KEDA research Jobs, only while the scaler grants the class slots.

Modules: model (pure data, validation), scripts (Lua: every transition atomic), queue
(WorkQueue over a Redis client), slots (the scaler's GetMetrics, fail closed), worker
(`gpu-pool-worker`), cli (`gpu-pool-scaler research ...`). Design: docs/research-queue.md.
"""
