"""The pure core: load model, exposition reader, policy, accounting, the cycle step.

No I/O and no httpx/grpc/kubernetes imports (checked by the import contract in
`make lint`): the server, the simulator and the tests run exactly this code.
"""
