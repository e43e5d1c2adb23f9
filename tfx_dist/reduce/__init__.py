"""Reductions: across local devices (cross_device, local) and across workers (cross_worker)."""
