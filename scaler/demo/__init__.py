"""`gpu-pool-scaler demo`: a simulated GPU pool on loopback, scaled by the real scaler."""

from scaler.demo.run import main

__all__ = ["main"]
