"""AMD Instinct GPUs: ROCm's device plugin, DRA driver and device-metrics-exporter, as this exporter meets them."""
