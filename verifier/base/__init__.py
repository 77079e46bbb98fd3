"""The base layer: settings, database, logs, metrics, rate limits, tracing, cancellation and the process-wide
work slots. Every other layer may import it; it imports none of them."""
