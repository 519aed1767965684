"""Running as a node among many organizations: limits and admission, metering, metrics, and the
per-request tracker that joins them."""
