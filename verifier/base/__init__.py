"""The base layer: settings, database, logs, metrics, rate limits, tracing, cancellation, the process-wide
work slots and timing statistics. Every other layer may import it; it imports none of them."""
