"""Trace-driven simulator of a GPU pool shared by vLLM inference and research Jobs.

Used by `python -m bench.simulate` (the bench, docs/bench.md) and reusable live, e.g. by
`gpu-pool-scaler demo`. The pieces are importable and steppable on their own:

    from scaler.sim.profile import ReplicaSpec          # model/GPU/TP, step-time model
    from scaler.sim.replica import Replica, ReplicaPool, RequestLog, Router
    from scaler.sim.workload import load_curve, make_workload, Workload

    spec = ReplicaSpec()                                # Llama-3-70B, TP4 on A100, 120 s load
    rep = Replica(spec, now=0.0)                        # one Ready replica with its own clock
    rep.submit(prompt=1200, output=200)                 # a request arriving now
    rep.step(1.0)                                       # advance one second
    rep.sample()                                        # scaler.core.load.EngineSample: waiting,
                                                        # running, KV usage, token counters

    # Several replicas behind the least-loaded router, driven by a real diurnal trace:
    w = make_workload(load_curve("azure-code-week"), start_s=0, duration_s=3600,
                      peak_rps=5.0, rng=numpy.random.default_rng(1))
    log = RequestLog.of(w.arrival, w.prompt, w.output)
    pool = ReplicaPool(spec, rows=4, log=log); router = Router()
    for r in range(4): pool.start(r, now=0.0)
    for t in range(3600):
        i, j = w.arrivals(t, t + 1)                     # request ids arriving in [t, t+1)
        router.route(pool, range(i, j))
        pool.step(t, 1.0)
        samples = [pool.sample(r) for r in range(4)]    # what /metrics would show

`log.first_token - log.arrival` is each request's TTFT. Kubernetes/KEDA emulation is in
`scaler.sim.kube`, the compared policies in `scaler.sim.policies`, the main loop in
`scaler.sim.engine`, scenarios and capacity calibration in `scaler.sim.scenario`.
"""
